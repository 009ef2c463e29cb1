"""The HTTP API, the kiosk path and the console: handlers, the OpenAPI document, headers
every answer carries, and what the daemon answers before a request reaches the application.
"""
