#!/usr/bin/env python3
"""Writes the small pickles tests/torch/pickle_reader_test.cc reads (run once; outputs are
committed so the tests never need Python). Values are listed in the test next to the asserts."""
import pickle

def sample(protocol):
    shared = [7]
    obj = {
        'ints': [0, 1, -1, 255, 256, 65535, 65536, 2**31 - 1, -2**31, 2**40, -2**63, 2**64 - 1,
                 -(2**40)],
        'misc': (None, True, False, 1.5, -2.25),
        's': 'h\u00e9llo',
        't1': (1,), 't2': (1, 2), 't3': (1, 2, 3), 't4': (1, 2, 3, 4),
        'empty': ((), [], {}),
        'shared': [shared, shared],
        'long': 'y' * 300,
    }
    if protocol >= 3:
        obj['b'] = b'\x00\x01\xff'
    if protocol >= 5:
        obj['ba'] = bytearray(b'ab')
    return obj

for protocol in (2, 3, 4, 5):
    with open(f'python-protocol{protocol}.pickle', 'wb') as f:
        pickle.dump(sample(protocol), f, protocol=protocol)

# Each of these needs a GLOBAL/STACK_GLOBAL + REDUCE, which the reader must refuse.
import collections
with open('python-protocol2-bytes.pickle', 'wb') as f:
    pickle.dump({'b': b'ab'}, f, protocol=2)  # protocol 2 spells bytes as _codecs.encode(...)
with open('python-protocol4-ordereddict.pickle', 'wb') as f:
    pickle.dump(collections.OrderedDict(a=1), f, protocol=4)
