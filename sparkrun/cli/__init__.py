"""The ``sparkrun`` command line: click commands and terminal rendering."""
