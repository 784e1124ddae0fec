"""The graphical-model engine: Private-PGM estimation and inference, numpy/scipy only.

Nothing here imports web, database or privacy code; it can be used as a library.
"""
