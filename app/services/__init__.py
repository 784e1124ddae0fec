"""Services: the only code that writes the database, shared by the API and the worker.

Every service function takes a `Session` as its first argument and only flushes;
the caller's unit of work (`Database.unit_of_work()`, or the API's per-request
session) commits once.
"""
