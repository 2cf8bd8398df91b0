"""The ``replay`` command and its sub-commands: command lines, shared options, text reports,
figures and listings. Front ends call the pipeline; nothing below them imports them."""
