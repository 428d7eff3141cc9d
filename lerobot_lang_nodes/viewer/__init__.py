"""ROS-free live view: compose annotated camera views, serve them as MJPEG, record PNG/MP4."""

from lerobot_lang_nodes.viewer.compose import Annotation, ComposeError, Composer
from lerobot_lang_nodes.viewer.mjpeg import MjpegServer, MjpegServerError
from lerobot_lang_nodes.viewer.video import LatestPngWriter, Mp4Writer, VideoWriterError

__all__ = ['Annotation', 'ComposeError', 'Composer', 'LatestPngWriter', 'MjpegServer',
           'MjpegServerError', 'Mp4Writer', 'VideoWriterError']
