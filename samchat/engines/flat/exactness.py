"""The flat engine's promise that it computes the file's own model: a tensor it cannot hold
with the numbers llama.cpp dequantizes is refused with NotExactError, never requantized
silently. The engine's loader turns it into a one-line notice and runs the file on llama.cpp;
requantizing stays possible only when the user asks for it (the "int4-requantized" format)."""

from __future__ import annotations

from samchat.errors import InexactError

# The --dtype that requantizes what the flat engine cannot hold exactly, and how it is shown.
REQUANTIZED = "int4-requantized"
REQUANTIZED_LABEL = "int4 (requantized)"


class NotExactError(InexactError):
    """A GGUF tensor whose type the flat engine cannot compute with its own numbers."""

    def __init__(self, tensor: str, kind: str) -> None:
        super().__init__(
            f"the flat engine cannot compute {tensor} ({kind}) exactly; run the file on "
            f"llama.cpp, or requantize it with --dtype {REQUANTIZED}"
        )
        self.tensor = tensor
        self.kind = kind
