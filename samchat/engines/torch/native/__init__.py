"""The lean forward's native core: lean.cpp, its build (build.py) and its call (forward.py)."""
