"""Tests for chapter20.word2vec.huffman (note, topic 1): the Huffman tree's codes are
prefix-free, optimal like gensim's and built fast, and bad counts are refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
from word2vec_helpers import zipf_counts

from chapter20.vocab.vocabulary import build_vocab
from chapter20.word2vec.huffman import build_huffman_tree


@pytest.mark.parametrize("n", [1, 2, 3, 17, 1000])
def test_huffman_codes_are_prefix_free_and_frequent_words_are_short(n):
    counts = zipf_counts(n)
    tree = build_huffman_tree(counts)
    codes = [tree.code(w) for w in range(n)]
    if n == 1:
        assert codes == [""]
        return
    assert len(set(codes)) == n
    ordered = sorted(codes)
    # In sorted order a code that is a prefix of another sits right before one it prefixes.
    assert not any(b.startswith(a) for a, b in zip(ordered, ordered[1:]))
    for a in range(n):
        for b in range(n):
            if counts[a] > counts[b]:
                assert tree.lengths[a] <= tree.lengths[b]
    # Kraft equality: a full binary tree's leaves use up the whole code space.
    assert math.isclose(sum(2.0**-tree.lengths), 1.0)
    # A path visits n - 1 distinct inner nodes at most, the root (n - 2) first.
    assert np.all(tree.points[:, 0] == n - 2)
    assert tree.points[tree.mask].max() == n - 2 and tree.points[tree.mask].min() >= 0


@pytest.mark.parametrize("s", [0.0, 0.8, 1.1, 2.0])
def test_huffman_mean_code_length_is_within_one_bit_of_the_entropy(s):
    counts = zipf_counts(5000, s)
    p = counts / counts.sum()
    entropy = float(-(p * np.log2(p)).sum())
    mean = build_huffman_tree(counts).mean_code_length(counts)
    assert entropy <= mean < entropy + 1


def test_huffman_tree_is_as_short_as_gensims(lee):
    from gensim.models import Word2Vec

    model = Word2Vec(sg=1, hs=1, negative=0, min_count=5, vector_size=8, seed=1)
    model.build_vocab(lee)
    vocab = build_vocab(lee, min_count=5)
    # The same words and counts; gensim orders ties by last appearance, build_vocab by first.
    counts = np.array([model.wv.get_vecattr(w, "count") for w in range(len(model.wv))])
    assert dict(zip(model.wv.index_to_key, counts)) == dict(zip(vocab.words, vocab.counts))
    tree = build_huffman_tree(counts)
    theirs = np.array([len(model.wv.get_vecattr(w, "code")) for w in range(len(counts))])
    # Both optimal: the same total code length, exactly (ties may fall differently).
    assert int((counts * tree.lengths).sum()) == int((counts * theirs).sum())
    assert (
        tree.points.max()
        == len(counts) - 2
        == max(max(model.wv.get_vecattr(w, "point")) for w in range(len(counts)))
    )


def test_huffman_tree_of_a_million_words_is_quick_and_compact():
    import time

    start = time.perf_counter()
    tree = build_huffman_tree(zipf_counts(10**6, total=10**9))
    assert time.perf_counter() - start < 30  # a few seconds; a guard against quadratic code
    assert tree.codes.dtype == np.int8 and tree.points.dtype == np.int32
    assert tree.codes.nbytes + tree.points.nbytes < 10**6 * 5 * 64


@pytest.mark.parametrize("n", [1, 2, 3, 17, 500])
def test_huffman_tree_equals_the_heap_built_tree(n):
    """The two-queue build pops what a heap of (count, index) items pops (gensim's way, ties by
    index): the same codes for every word, bitwise; small counts make many ties."""
    import heapq

    rng = np.random.default_rng(n)
    for counts in (rng.integers(1, 4, n), rng.integers(1, 10**6, n)):
        parent, bit = np.full(2 * n - 1, -1), np.zeros(2 * n - 1, dtype=int)
        heap = [(int(c), i) for i, c in enumerate(counts)]
        heapq.heapify(heap)
        for node in range(n, 2 * n - 1):
            (count_a, a), (count_b, b) = heapq.heappop(heap), heapq.heappop(heap)
            parent[a] = parent[b] = node
            bit[b] = 1
            heapq.heappush(heap, (count_a + count_b, node))
        tree = build_huffman_tree(counts)
        for word in range(n):
            code, node = "", word
            while parent[node] >= 0:
                code, node = str(bit[node]) + code, parent[node]
            assert tree.code(word) == code


def test_huffman_rejects_bad_counts():
    with pytest.raises(ValueError, match="counts"):
        build_huffman_tree([])
    with pytest.raises(ValueError, match="counts"):
        build_huffman_tree([3, 0, 1])
