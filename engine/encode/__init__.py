"""The one place where categories live: column kinds, the dictionary pass, codes, and
the encoded source every method's passes read.

* ``kinds``: a column's kind from its type (numeric, date, ordinal, nominal; numbers
  but not Booleans), and how a CSV input's QIs are typed;
* ``dictionary``: the dictionary pass (``learn``): every categorical column's
  categories in a deterministic order (``order="text"``: the MDAV family's;
  ``order="value"``: the range methods'), their checks, and the codes of a chunk;
* ``source``: ``EncodedSource``, a source whose categorical columns read as codes
  (``ValueCodes``, the range methods) or as the mixed distance's encoded columns;
* ``mixed``: the MDAV family's mixed-type QIs (``plan``, ``Mixed``, ``MixedMoments``,
  ``Publisher``): the heterogeneous distance's encoding and what is published.
"""

from .dictionary import Categorical, Dictionary, learn, value_codes, value_order
from .kinds import KINDS, csv_types, is_categorical, is_number, is_temporal, kind_of
from .source import EncodedSource, ValueCodes

__all__ = ["Categorical", "Dictionary", "EncodedSource", "KINDS", "ValueCodes", "csv_types", "is_categorical",
           "is_number", "is_temporal", "kind_of", "learn", "value_codes", "value_order"]
