"""Dependency analysis and attribute selection (Sun et al. (AMA), sections 3.1-3.3; Oommen & Fayyoumi (EMAD), EMAD).

Which quasi-identifiers should drive the grouping? Both seeds answer with a
dependency tree over the attributes: estimate how strongly every pair depends,
keep the spanning tree of strongest dependence (Chow-Liu) and pick the vertices of
highest degree as *key attributes*. Microaggregating on those only is much cheaper
and, on the seeds' data, loses little information.

The flow, one stage per section below:

1. **Plan the bins** (``plan_bins``): every attribute becomes small integer codes.

   ====================  ==================================================================
   column type           codes
   ====================  ==================================================================
   string, categorical   dictionary code: index in the sorted distinct values; ``width`` is
                         an error (it has no meaning for categories)
   boolean               by value (2 bins)
   integer               by value, one bin per integer of ``[min, max]``, when that span is
                         at most ``levels`` (no ``bins``/``width`` given) or at most ``bins``;
                         otherwise as a float column. We test the *span*, not the number of
                         distinct values, so that a Parquet input is planned from its
                         row-group statistics without reading it; an integer column with
                         few distinct values spread widely gets equal-width bins, which
                         keep them apart unless two share a bin.
   float                 equal width ``width`` from the column minimum (Oommen & Fayyoumi (EMAD): "divided
                         it into a number of sub-intervals sharing the same width"), or
                         ``bins`` equal bins over ``[min, max]`` (default 10, the seed's ten
                         sub-intervals), or ``binning="quantile"``: ``bins`` bins cut at
                         the quantiles (one extra pass)
   constant / all null   one bin
   ====================  ==================================================================

   Every column also has a trailing *null bin* for nulls and NaN. Empty bins change
   no measure, so an unused null bin costs nothing.

2. **Count** (``count_pairs``): one streaming pass over an ``engine.io.TableSource``;
   the Numba kernels of ``engine.kernels.dependency.histogram`` accumulate the 1-D and all-pairs
   joint counts with per-thread private arrays. Chunking and threads never change
   the counts. The Gaussian measure streams pairwise moments instead.

3. **Measure** (``measure_matrix``), all in bits (log base 2, as Sun et al. (AMA)):
   ``mi-distance`` H(A|B) + H(B|A) (Sun et al. (AMA), Definition 2), ``emim`` (Oommen & Fayyoumi (EMAD),
   eq. 5), ``chi2`` (eq. 6) and ``gaussian`` -0.5 log2(1 - rho^2), the mutual
   information of two jointly normal variables with Pearson correlation rho (seed
   004, section 4.2.4 "assuming normality"). Oommen & Fayyoumi (EMAD) leaves the base of its log
   open; the base scales every weight alike and cannot change a tree.

4. **Tree** (``spanning_tree``): Kruskal's minimum spanning tree on the MI distance
   (Sun et al. (AMA), Algorithm 1), the maximum spanning tree on the other measures (seed
   004, EMAD step 3); equal weights are taken in (i, j) order.

5. **Select** (``definition5`` for Sun et al. (AMA), ``emad_top`` for Oommen & Fayyoumi (EMAD)): vertices
   ranked by degree, decreasing; ties by *strength*, the dependence carried by the
   vertex's tree edges (the sum of its edge weights for a maximum tree, minus the
   sum for the MI-distance tree), then by column position. ``emad_candidates``
   lists every subset the degree ranking alone allows, which is what Oommen & Fayyoumi (EMAD)'s
   tables call "No. of possibilities".

``profile`` runs 1-5 and returns a ``ProfileResult``. The in-memory research helpers
(AMA in memory, the exhaustive-subset baseline) live in ``benchmarks/research.py``.

One module per stage: ``binning``, ``counting``, ``measures``, ``tree``, ``profile``.
"""

from .binning import BINNINGS, BinPlan, DEFAULT_BINS, DEFAULT_CHUNK_ROWS, DEFAULT_LEVELS, MAXIMIZE, MAX_CELLS, MEASURES, plan_bins
from .counting import Counts, code_dtype, count_pairs, encode_column, pearson_matrix
from .measures import chi2, conditional_entropy, emim, entropy, gaussian, gaussian_matrix, measure_matrix, mi_distance
from .tree import definition5, emad_candidates, emad_top, rank_vertices, spanning_tree, tree_degrees, tree_strength
from .profile import ProfileResult, profile, profile_from_matrix, select_key_attributes
