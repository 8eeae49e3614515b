"""Facts and their parsers: each pairs the command that reads a fact with a pure parser.

Nothing here runs a command: the command lines are data (``*_ARGV``) that stages hand to
an executor, and the parsers take text. The CUDA->driver table and the triage classifier
live here too, so a report can be regenerated from evidence alone.
"""
