"""The DDS defaults every process of the project starts with."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from lerobot_lang_nodes import dds


def test_defaults_keep_discovery_on_this_machine():
    env = dds.ros_environment({})
    assert env['ROS_AUTOMATIC_DISCOVERY_RANGE'] == 'LOCALHOST'
    assert env['ROS_DOMAIN_ID'] == str(dds.DEFAULT_DOMAIN_ID)
    assert env['RMW_IMPLEMENTATION'] == 'rmw_fastrtps_cpp'
    assert env['FASTDDS_DEFAULT_PROFILES_FILE'] == str(dds.shm_profile_path())


def test_a_users_explicit_choices_are_kept():
    env = dds.ros_environment({'ROS_AUTOMATIC_DISCOVERY_RANGE': 'SUBNET', 'ROS_DOMAIN_ID': '7',
                               'FASTDDS_DEFAULT_PROFILES_FILE': '/etc/mine.xml'})
    assert env['ROS_AUTOMATIC_DISCOVERY_RANGE'] == 'SUBNET'
    assert env['ROS_DOMAIN_ID'] == '7'
    assert env['FASTDDS_DEFAULT_PROFILES_FILE'] == '/etc/mine.xml'
    assert dds.ros_environment({}, domain_id=12)['ROS_DOMAIN_ID'] == '12'
    assert 'FASTDDS_DEFAULT_PROFILES_FILE' not in dds.ros_environment({}, shared_memory=False)


def test_shipped_profile_is_shared_memory_only_with_a_16_mib_segment():
    ns = {'d': 'http://www.eprosima.com'}
    root = ET.parse(dds.shm_profile_path()).getroot()
    kinds = [t.text for t in root.iterfind('.//d:transport_descriptor/d:type', ns)]
    assert kinds == ['SHM']
    assert root.find('.//d:segment_size', ns).text == str(16 * 1024 * 1024)
    assert root.find('.//d:useBuiltinTransports', ns).text == 'false'
