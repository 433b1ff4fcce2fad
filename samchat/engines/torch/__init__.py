"""The torch engine: Hugging Face models on any torch device, and everything only it uses (the
forward with its kernel choice, the KV slab, fixed-shape steps and CUDA graphs, its cost
measurement). Nothing here is imported unless the torch engine runs."""
