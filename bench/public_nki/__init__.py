"""Public NKI kernels as their authors wrote them: the entries (file, function, inputs, arguments and a numpy
reference written for this bench) and the harness that traces, compiles and runs each one.

The kernels themselves are never in this repository: ``bench/bench_public_nki.py --repos DIR`` reads them
from clones of aws-neuron/nki-samples, aws-neuron/aws-neuron-sdk, aws-neuron/nki-library and leanprover/KLR
that the user made in DIR (each named OWNER+NAME, as ``tusk``'s own fetch scripts name them)."""
