# Writes the fuzz reproducer memo-amplification-N.pickle (corpus/torch_import_fuzzer/): one segment
# dict and one empty block listed N times each through the pickle memo. Usage: N OUT.
import pickle, sys
n = int(sys.argv[1]); out = sys.argv[2]
block = {"size": 0, "state": "active_allocated"}   # no address: legacy walk; size 0 never advances
seg = {"device": 0, "address": 0x7f0000000000, "total_size": 0, "blocks": [block] * n}
doc = {"segments": [seg] * n}
with open(out, "wb") as f:
    pickle.dump(doc, f, protocol=4)
