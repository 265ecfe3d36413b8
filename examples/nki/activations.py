"""A tour of the element-wise nki.language functions, returning two tensors (no single tutorial:
the nki.language API pages, one call each).

out_a = gelu(x) + sigmoid(x) * tanh(x) - relu(x) + max(min(x, 1), -1) - x^2
out_b = log(y) + sqrt(y) * (1 / y) - (1 - y) + exp(-y)          (y > 0)
"""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def nki_activations(x_tensor, y_tensor):
    """x_tensor, y_tensor [M, 512], M a multiple of 128, y_tensor positive; returns (out_a, out_b)."""
    out_a = nl.ndarray(x_tensor.shape, dtype=x_tensor.dtype, buffer=nl.shared_hbm)
    out_b = nl.ndarray(y_tensor.shape, dtype=y_tensor.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:128, 0:512]

    for m in nl.affine_range(x_tensor.shape[0] // 128):
        x = nl.load(x_tensor[m * 128 + i_p, i_f])
        y = nl.load(y_tensor[m * 128 + i_p, i_f])

        a = nl.gelu(x) + nl.sigmoid(x) * nl.tanh(x)
        a = nl.subtract(a, nl.relu(x))
        a = a + nl.maximum(nl.minimum(x, 1.0), -1.0)
        a = a - nl.square(x)
        nl.store(out_a[m * 128 + i_p, i_f], value=a)

        # 1 - y: tensor_scalar with the operands of the subtraction swapped
        one_minus_y = nisa.tensor_scalar(data=y, op0=nl.subtract, operand0=1.0, reverse0=True)
        b = nl.log(y) + nl.multiply(nl.sqrt(y), nl.reciprocal(y))
        b = nisa.tensor_tensor(b, one_minus_y, op=nl.subtract)
        b = b + nl.exp(nl.negative(y))
        nl.store(out_b[m * 128 + i_p, i_f], value=b)

    return out_a, out_b
