"""Rendering stored episodes to video: the video files (video.py: a file written as frames come, or a whole
file's bytes) and several episodes laid out in one file (episodes.py). Frames themselves come from
``Dataset.render_episode`` (vcollect/store/read/episode_frames.py)."""

from vcollect.render.episodes import RenderedVideo, pick_episodes, render_video
from vcollect.render.video import VideoWriter, encode_video

__all__ = ["RenderedVideo", "VideoWriter", "encode_video", "pick_episodes", "render_video"]
