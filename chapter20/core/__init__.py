"""The ground every layer stands on: argument checks, paths, device and determinism,
measuring, plotting, the claims and the GPU record, the corpora, and the small models every
section shares. Imports nothing of the layers above (ARCHITECTURE.md)."""
