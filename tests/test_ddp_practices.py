"""§20.4.1 chapter20.techniques.ddp_practices: the prediction of ``find_unused_parameters``' graph
walk counts the graph's nodes, more for a deeper encoder. The practices themselves run on a gloo
group in ``tests/test_distributed.py`` (``practices_on_rank``)."""

from chapter20.techniques.ddp_practices import unused_search_prediction


def test_unused_search_prediction_counts_the_graph():
    small = {"vocab_size": 50, "width": 8, "depth": 2, "classes": 4}
    deeper = {**small, "depth": 4}
    few, more = (unused_search_prediction(4, model, repeat=2) for model in (small, deeper))
    assert 0 < few["nodes"] < more["nodes"] and few["ms"] >= 0
