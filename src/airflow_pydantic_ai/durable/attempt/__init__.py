"""One try's attempt and its agent runs: opening, finding a step, the writer, the ends."""
