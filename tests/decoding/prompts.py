"""Real prompts for the end-to-end decoding tests: single questions, multi-turn chats, long
passages to summarise (copy-heavy, where suffix-automaton drafts get accepted)."""

from __future__ import annotations

PASSAGE_RIVER = (
    "The river Lune rises on the slopes of the Howgill Fells and runs south for about seventy "
    "kilometres before it reaches the sea near the old port of Lancaster. In the eighteenth "
    "century the town grew rich on trade with the West Indies: ships carried wool, furniture "
    "and candles out, and brought back sugar, rum, cotton and mahogany. The quay was lined with "
    "warehouses, several of which still stand today and now hold a maritime museum, a cafe and "
    "a number of small flats. When larger ships could no longer reach the quay because the "
    "channel silted up, the trade moved downstream to Glasson Dock, which was connected to the "
    "canal in 1826. The railway arrived in 1840 and the town turned to making linoleum, which "
    "it sold all over the world for almost a century. The linoleum works closed in the 1960s. "
    "Today the river is known for its salmon and sea trout, for the aqueduct that carries the "
    "canal over it on five stone arches, and for the wide salt marshes of its estuary, where "
    "thousands of wading birds spend the winter."
)

PASSAGE_BATTERY = (
    "A lithium-ion battery stores energy by moving lithium ions between two electrodes. While "
    "the battery charges, ions leave the positive electrode, usually a metal oxide such as "
    "lithium cobalt oxide or lithium iron phosphate, cross the electrolyte and settle between "
    "the layers of graphite in the negative electrode. While it discharges, the ions travel "
    "back and electrons flow through the outside circuit, powering the device. Each cycle wears "
    "the battery a little: a thin film called the solid electrolyte interphase grows on the "
    "graphite, trapping lithium that can no longer move, and the electrodes crack slowly as "
    "they swell and shrink. Heat speeds up all of these processes, which is why a phone left "
    "in a hot car loses capacity faster than one kept cool. Keeping the charge between twenty "
    "and eighty percent, avoiding fast charging when it is not needed, and storing the battery "
    "half full when it will not be used for months all help it last longer."
)

SINGLE_TURN: list[str] = [
    "What is the capital of France? Answer in one sentence.",
    "Write a Python function that returns the factorial of a number.",
    "List five fruits that are red.",
    "Translate to French: 'The cat is sleeping on the sofa.'",
    "If I have 3 apples and buy 4 more, how many apples do I have? Explain briefly.",
    "Repeat this sentence exactly three times: The quick brown fox jumps over the lazy dog.",
    "Give me three tips for sleeping better.",
    "Explain what a hash table is in two sentences.",
    "Write a haiku about the sea.",
    "What is the difference between a list and a tuple in Python?",
    "Write the numbers from 1 to 20 separated by commas.",
    "Name the planets of the solar system in order from the sun.",
]

MULTI_TURN: list[list[str]] = [
    ["Tell me a fun fact about octopuses.", "Tell me another one.", "Which one do you like more?"],
    ["What is photosynthesis?", "Summarize that in one sentence."],
    ["Write a short poem about rain.", "Now write it again, but about snow."],
    ["How do I make a cup of tea?", "What if I want it with milk?"],
]

LONG_CONTEXT: list[str] = [
    f"Summarize the following text in three sentences.\n\n{PASSAGE_RIVER}",
    f"Read the text and list the goods that ships brought back.\n\n{PASSAGE_RIVER}",
    f"Summarize the following text.\n\n{PASSAGE_BATTERY}",
    f"Based on the text, how can I make my battery last longer?\n\n{PASSAGE_BATTERY}",
]

# A third of the above for the second cost curve of each engine's check: short questions, a
# copy-heavy one, two long passages (keys past the first 256-row window) and a three-turn chat
# (the cache reused twice). The first curve's check runs them all.
SAMPLE_SINGLE: list[str] = [
    SINGLE_TURN[0],
    SINGLE_TURN[5],
    SINGLE_TURN[10],
    LONG_CONTEXT[0],
    LONG_CONTEXT[3],
]
SAMPLE_MULTI: list[list[str]] = MULTI_TURN[:1]

# About half of the above for the torch engine's check on the CPU's curve (its float32 replies
# and transformers' reference replies are the suite's slowest decoding; llama.cpp runs them
# all). It holds every prompt the flat curve and the fixed-step check run, so each reference
# is computed once: short questions, code, arithmetic, copy-heavy lists, passages of both
# texts, a three-turn and a two-turn chat.
HALF_SINGLE: list[str] = [
    *SAMPLE_SINGLE,
    SINGLE_TURN[1],
    SINGLE_TURN[4],
    SINGLE_TURN[11],
    LONG_CONTEXT[2],
]
HALF_MULTI: list[list[str]] = [MULTI_TURN[0], MULTI_TURN[3]]
