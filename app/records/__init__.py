"""Counting engines for datasets registered by reference (`app.records.engine`).

Only `app.services.gate` imports this package: every read of raw records passes the gate.
"""
