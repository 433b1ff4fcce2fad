"""The flat engine: llama, qwen2 and qwen3 GGUFs on the CPU in weight-only int4/int8 tiles that
hold the file's own numbers, every row computed alone, so verifying a draft costs little more
than one step and gives a one-token step's logits. Nothing here is imported unless it runs."""
