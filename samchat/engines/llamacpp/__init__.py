"""The llama.cpp engine: GGUF files through llama.cpp's C API (llama-cpp-python's bindings), on the
CPU."""
