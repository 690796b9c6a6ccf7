"""How values are stored: the codec (no pickle), the exactness check, the classes a stored value may name."""
