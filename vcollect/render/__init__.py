"""Rendering stored episodes to video: the labels drawn on frames (text.py), the video files (video.py) and
several episodes laid out in one file (episodes.py). Frames themselves come from
``Dataset.render_episode`` (vcollect/store/read/episode_frames.py)."""
