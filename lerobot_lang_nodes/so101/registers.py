"""STS3215 control table and protocol constants (data only)."""

# Feetech STS/SMS series memory map, protocol 0, little-endian multi-byte values.
# Datasheet (the URL LeRobot's feetech/tables.py cites):
# http://doc.feetech.cn/#/prodinfodownload?srcType=FT-SMS-STS-emanual-229f4476422d4059abfb1cb0  # noqa: E501

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Area = Literal['eeprom', 'ram', 'factory']


@dataclass(frozen=True)
class Register:
    """One control-table entry: where it lives and how its bytes encode a value."""

    name: str
    address: int
    size: int  # bytes
    area: Area
    writable: bool = True
    sign_bit: int | None = None  # sign-magnitude direction bit, None = unsigned


def _eeprom(name: str, address: int, size: int, writable: bool = True,
            sign_bit: int | None = None) -> Register:
    return Register(name, address, size, 'eeprom', writable, sign_bit)


def _ram(name: str, address: int, size: int, writable: bool = True,
         sign_bit: int | None = None) -> Register:
    return Register(name, address, size, 'ram', writable, sign_bit)


def _factory(name: str, address: int, size: int) -> Register:
    return Register(name, address, size, 'factory', True, None)


_TABLE = (
    _eeprom('Firmware_Major_Version', 0, 1, writable=False),
    _eeprom('Firmware_Minor_Version', 1, 1, writable=False),
    _eeprom('Model_Number', 3, 2, writable=False),
    _eeprom('ID', 5, 1),
    _eeprom('Baud_Rate', 6, 1),
    _eeprom('Return_Delay_Time', 7, 1),  # units of 2 us
    _eeprom('Response_Status_Level', 8, 1),
    _eeprom('Min_Position_Limit', 9, 2),
    _eeprom('Max_Position_Limit', 11, 2),
    _eeprom('Max_Temperature_Limit', 13, 1),  # degC
    _eeprom('Max_Voltage_Limit', 14, 1),  # 0.1 V
    _eeprom('Min_Voltage_Limit', 15, 1),  # 0.1 V
    _eeprom('Max_Torque_Limit', 16, 2),  # 0.1 % of stall torque
    _eeprom('Phase', 18, 1),
    _eeprom('Unloading_Condition', 19, 1),
    _eeprom('LED_Alarm_Condition', 20, 1),
    _eeprom('P_Coefficient', 21, 1),
    _eeprom('D_Coefficient', 22, 1),
    _eeprom('I_Coefficient', 23, 1),
    _eeprom('Minimum_Startup_Force', 24, 2),
    _eeprom('CW_Dead_Zone', 26, 1),
    _eeprom('CCW_Dead_Zone', 27, 1),
    _eeprom('Protection_Current', 28, 2),  # 6.5 mA
    _eeprom('Angular_Resolution', 30, 1),
    _eeprom('Homing_Offset', 31, 2, sign_bit=11),
    _eeprom('Operating_Mode', 33, 1),
    _eeprom('Protective_Torque', 34, 1),
    _eeprom('Protection_Time', 35, 1),
    _eeprom('Overload_Torque', 36, 1),  # %
    _eeprom('Velocity_Closed_Loop_P', 37, 1),
    _eeprom('Over_Current_Protection_Time', 38, 1),
    _eeprom('Velocity_Closed_Loop_I', 39, 1),
    _ram('Torque_Enable', 40, 1),
    _ram('Acceleration', 41, 1),
    _ram('Goal_Position', 42, 2, sign_bit=15),
    _ram('Goal_Time', 44, 2),
    _ram('Goal_Velocity', 46, 2, sign_bit=15),
    _ram('Torque_Limit', 48, 2),
    _ram('Lock', 55, 1),
    _ram('Present_Position', 56, 2, writable=False, sign_bit=15),
    _ram('Present_Velocity', 58, 2, writable=False, sign_bit=15),  # steps/s
    _ram('Present_Load', 60, 2, writable=False, sign_bit=10),  # 0.1 % of stall torque
    _ram('Present_Voltage', 62, 1, writable=False),  # 0.1 V
    _ram('Present_Temperature', 63, 1, writable=False),  # degC
    _ram('Status', 65, 1, writable=False),
    _ram('Moving', 66, 1, writable=False),
    _ram('Present_Current', 69, 2, writable=False),  # 6.5 mA
    _ram('Goal_Position_2', 71, 2, writable=False),
    _factory('Moving_Velocity_Threshold', 80, 1),
    _factory('DTs', 81, 1),  # ms
    _factory('Velocity_Unit_Factor', 82, 1),
    _factory('Hts', 83, 1),  # ns
    _factory('Maximum_Velocity_Limit', 84, 1),
    _factory('Maximum_Acceleration', 85, 1),
    _factory('Acceleration_Multiplier', 86, 1),
)

CONTROL_TABLE: dict[str, Register] = {r.name: r for r in _TABLE}
CONTROL_TABLE_SIZE = 87  # bytes; highest address + size
EEPROM_END = 40  # addresses below this are EEPROM (written only while Lock == 0)

MODEL_NUMBERS: dict[str, int] = {'sts3215': 777, 'sts3250': 2825, 'sm8512bl': 11272}
STS3215_MODEL_NUMBER = MODEL_NUMBERS['sts3215']
RESOLUTION_STEPS = 4096  # encoder steps per revolution
MAX_STEP = RESOLUTION_STEPS - 1  # LeRobot divides by this in its degree conversion

# Baud_Rate register value for each line rate (bit/s).
BAUD_TABLE: dict[int, int] = {
    1_000_000: 0, 500_000: 1, 250_000: 2, 128_000: 3,
    115_200: 4, 57_600: 5, 38_400: 6, 19_200: 7,
}
DEFAULT_BAUDRATE = 1_000_000
RETURN_DELAY_UNIT_US = 2.0  # one Return_Delay_Time count
FACTORY_RETURN_DELAY = 250  # = 500 us until configured to 0

# Sign-magnitude direction bit per register (also carried on Register.sign_bit).
SIGN_BITS: dict[str, int] = {r.name: r.sign_bit for r in _TABLE if r.sign_bit is not None}

# Phase register bit 4 selects the multi-turn angle feedback; cleared so positions stay 0..4095.
PHASE_ANGLE_FEEDBACK_BIT = 0x10

# Operating_Mode values.
MODE_POSITION = 0
MODE_VELOCITY = 1
MODE_PWM = 2
MODE_STEP = 3

# Factory values the emulator starts from (STS3215 datasheet defaults).
FACTORY_DEFAULTS: dict[str, int] = {
    'Firmware_Major_Version': 3,
    'Firmware_Minor_Version': 10,
    'Model_Number': STS3215_MODEL_NUMBER,
    'Baud_Rate': 0,
    'Return_Delay_Time': FACTORY_RETURN_DELAY,
    'Response_Status_Level': 1,
    'Min_Position_Limit': 0,
    'Max_Position_Limit': MAX_STEP,
    'Max_Temperature_Limit': 70,
    'Max_Voltage_Limit': 140,
    'Min_Voltage_Limit': 40,
    'Max_Torque_Limit': 1000,
    'Phase': 0,
    'Unloading_Condition': 44,
    'LED_Alarm_Condition': 47,
    'P_Coefficient': 32,
    'D_Coefficient': 32,
    'I_Coefficient': 0,
    'Minimum_Startup_Force': 16,
    'CW_Dead_Zone': 1,
    'CCW_Dead_Zone': 1,
    'Protection_Current': 500,
    'Angular_Resolution': 1,
    'Homing_Offset': 0,
    'Operating_Mode': MODE_POSITION,
    'Protective_Torque': 20,
    'Protection_Time': 200,
    'Overload_Torque': 80,
    'Torque_Enable': 0,
    'Acceleration': 0,
    'Torque_Limit': 1000,
    'Lock': 1,
    'Present_Voltage': 120,
    'Present_Temperature': 30,
    'Maximum_Acceleration': 0,
}
