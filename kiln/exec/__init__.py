"""Entry points run as ``python -m kiln.exec.<name>``."""
