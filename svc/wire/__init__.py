"""Sans-IO codecs shared by api and engine: time formats, stream frames, JSON lines."""
