"""The json-file log driver: the writer (``writer``: records appended, rotation, compression),
its options (``options``: max-size, max-file, compress), reading back (``reader``: a snapshot
of the files, framed or as records, with tail and since) and following (``follow``). The record
format itself is ``svc.wire.jsonlog`` and its decoder ``svc.wire.jsonlog_parse``."""
