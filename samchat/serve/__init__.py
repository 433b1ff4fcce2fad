"""`samchat serve`: an OpenAI-compatible HTTP server over one loaded model.

protocol: requests checked and replies shaped (no web library); worker: the engine thread and
its job queue; history: --save; app: the routes (starlette); server: the process (uvicorn).
Nothing is imported here, so protocol stays usable without the serve extra.
"""
