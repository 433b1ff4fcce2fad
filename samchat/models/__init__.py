"""Loading models: the offline default, local directories, GGUF files and hub ids."""

from samchat.models.loader import LoadedModel, ModelSpec, load_model, load_tokenizer

__all__ = ["LoadedModel", "ModelSpec", "load_model", "load_tokenizer"]
