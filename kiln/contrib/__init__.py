"""Helpers around modules: temporary directories, compilers and linkers, tar files."""
