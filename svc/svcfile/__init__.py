"""The builder's pure parts: the instructions-file parser, shell-word expansion, and the
context ignore matcher. No I/O beyond what the caller hands in; no trio."""
