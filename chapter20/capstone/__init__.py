"""§20.6–§20.7 The capstone application: a real text encoder trained with every technique at once.

- ``views``: the training signal (documents, two random views of each);
- ``recipe``: the encoder recipe, building, training and the recipe study;
- ``evaluation``: Lee document similarity, baselines, held-out retrieval (§20.7);
- ``run``: the chapter in one run (``chapter20 train``): plan, cost, resumable training, summary.
"""
