"""``python -m scheduler serve``: a read-only web view of the store, live while runs go on.

Only the ``serve`` command imports this package (Starlette and uvicorn are not loaded by
any other command). :func:`scheduler.serve.app.create_app` builds the ASGI application.
"""
