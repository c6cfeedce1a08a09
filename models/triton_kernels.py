"""The Triton kernels of models/triton_recurrence.py (which explains them). Imported only from there, lazily:
importing this module imports Triton."""

import triton
import triton.language as tl


@triton.jit
def sigma(z, b, slope, ACTIVATION: tl.constexpr):  # slope: a scalar in z's dtype
    if ACTIVATION == 0:  # modReLU: sign(z) relu(|z| + b), sign(0) = 0
        magnitude = tl.maximum(tl.abs(z) + b[None, :], 0.0)
        return tl.where(z > 0, magnitude, tl.where(z < 0, -magnitude, 0.0))
    return tl.where(z > 0, z, z * slope)  # leaky ReLU


@triton.jit
def product(a, b, BLOCK_B: tl.constexpr):
    """a (BLOCK_B, K) @ b (K, M) in IEEE float32 (never TF32): tl.dot from 16 rows on (its least), below that a
    broadcast product summed over K, which lets a program own fewer rows, so that more programs share a batch.
    The sum is tl.reduce with Triton's own sum combine, which tl.sum lowers to: tl.sum itself, decorated when Triton
    was first imported, fails in the interpreter where TRITON_INTERPRET was set after that (as in the test suite),
    and the interpreter sums this combine with numpy (another combine it applies element by element, 100x slower)."""
    if BLOCK_B >= 16:
        return tl.dot(a, b, input_precision="ieee")
    return tl.reduce(a[:, :, None] * b[None, :, :], 1, tl.standard._sum_combine)


@triton.jit
def forward_tile(
    u_ptr,
    w_ptr,
    b_ptr,
    prev_ptr,
    offsets_ptr,
    h_ptr,
    rows,
    row_ok,
    cols,
    N,
    slope,
    ACTIVATION,
    HAS_OFFSETS,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """One (rows, cols) tile of h_t = sigma(u_t + W h_{t-1}) [+ offsets_t]: u, offsets and h point at step t, prev
    at h_{t-1}."""
    lanes = tl.arange(0, BLOCK_N)
    tile = row_ok[:, None] & (cols < N)[None, :]
    where = rows[:, None] * N + cols[None, :]
    z = tl.load(u_ptr + where, mask=tile, other=0.0)
    for k0 in range(0, N, BLOCK_N):
        ks = k0 + lanes
        prev = tl.load(prev_ptr + rows[:, None] * N + ks[None, :], mask=row_ok[:, None] & (ks < N)[None, :], other=0.0)
        # W^T[k, j] = W[j, k]
        wt = tl.load(w_ptr + cols[None, :] * N + ks[:, None], mask=(ks < N)[:, None] & (cols < N)[None, :], other=0.0)
        z += product(prev, wt, BLOCK_B)  # z_t = u_t + W h_{t-1}
    b = tl.load(b_ptr + cols, mask=cols < N, other=0.0)
    h = sigma(z, b, slope, ACTIVATION)
    if HAS_OFFSETS:
        h += tl.load(offsets_ptr + where, mask=tile, other=0.0)
    tl.store(h_ptr + where, h, mask=tile)


@triton.jit
def backward_tile(
    grad_h_ptr,
    w_ptr,
    h_ptr,
    offsets_ptr,
    later_ptr,
    grad_z_ptr,
    total_ptr,
    rows,
    row_ok,
    cols,
    N,
    slope,
    has_later,
    ACTIVATION,
    HAS_OFFSETS,
    WANT_TOTAL,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """One (rows, cols) tile of dL/dz_t from dL/dh_t (direct, plus W^T dL/dz_{t+1} where `has_later`): grad_h, h,
    offsets, grad_z and total point at step t, later at dL/dz_{t+1}."""
    lanes = tl.arange(0, BLOCK_N)
    tile = row_ok[:, None] & (cols < N)[None, :]
    where = rows[:, None] * N + cols[None, :]
    total = tl.load(grad_h_ptr + where, mask=tile, other=0.0)
    if has_later:  # dL/dh_t = direct + W^T dL/dz_{t+1}, as row vectors: dz_{t+1} W
        for k0 in range(0, N, BLOCK_N):
            ks = k0 + lanes
            later = tl.load(
                later_ptr + rows[:, None] * N + ks[None, :], mask=row_ok[:, None] & (ks < N)[None, :], other=0.0
            )
            w = tl.load(
                w_ptr + ks[:, None] * N + cols[None, :], mask=(ks < N)[:, None] & (cols < N)[None, :], other=0.0
            )
            total += product(later, w, BLOCK_B)
    if WANT_TOTAL:
        tl.store(total_ptr + where, total, mask=tile)
    out = tl.load(h_ptr + where, mask=tile, other=0.0)
    if HAS_OFFSETS:
        out -= tl.load(offsets_ptr + where, mask=tile, other=0.0)  # sigma's own output
    if ACTIVATION == 0:
        slope_t = tl.where(out != 0, 1.0, 0.0)  # modReLU passes z exactly where its output is nonzero
    else:
        slope_t = tl.where(out > 0, 1.0, slope)
    tl.store(grad_z_ptr + where, total * slope_t, mask=tile)


@triton.jit
def forward_kernel(
    u_ptr,
    w_ptr,
    b_ptr,
    h0_ptr,
    offsets_ptr,
    h_ptr,
    T,
    B,
    N,
    slope_ptr,
    ACTIVATION: tl.constexpr,
    HAS_OFFSETS: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    row_ok = rows < B
    slope = tl.load(slope_ptr)  # in the states' dtype (a float argument would be float32)
    for t in range(T):
        step = t * B * N
        if t == 0:
            prev_ptr = h0_ptr
        else:
            prev_ptr = h_ptr + step - B * N
        for j0 in range(0, N, BLOCK_N):
            cols = j0 + tl.arange(0, BLOCK_N)
            forward_tile(
                u_ptr + step,
                w_ptr,
                b_ptr,
                prev_ptr,
                offsets_ptr + step,
                h_ptr + step,
                rows,
                row_ok,
                cols,
                N,
                slope,
                ACTIVATION,
                HAS_OFFSETS,
                BLOCK_B,
                BLOCK_N,
            )
        tl.debug_barrier()  # step t's states stored before step t+1 reads them


@triton.jit
def backward_kernel(
    grad_h_ptr,
    w_ptr,
    h_ptr,
    offsets_ptr,
    grad_z_ptr,
    total_ptr,
    T,
    B,
    N,
    slope_ptr,
    ACTIVATION: tl.constexpr,
    HAS_OFFSETS: tl.constexpr,
    WANT_TOTAL: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    row_ok = rows < B
    slope = tl.load(slope_ptr)
    for s in range(T):
        step = (T - 1 - s) * B * N
        for j0 in range(0, N, BLOCK_N):
            cols = j0 + tl.arange(0, BLOCK_N)
            backward_tile(
                grad_h_ptr + step,
                w_ptr,
                h_ptr + step,
                offsets_ptr + step,
                grad_z_ptr + step + B * N,
                grad_z_ptr + step,
                total_ptr + step,
                rows,
                row_ok,
                cols,
                N,
                slope,
                s > 0,
                ACTIVATION,
                HAS_OFFSETS,
                WANT_TOTAL,
                BLOCK_B,
                BLOCK_N,
            )
        tl.debug_barrier()  # dL/dz_t stored before step t-1 reads it


# The per-step kernels: one launch computes one step t for every (BLOCK_B, BLOCK_N) tile of the states at once
# (programs over rows and columns: ceil(B / BLOCK_B) * ceil(N / BLOCK_N) of them, not ceil(B / BLOCK_B)), and the
# launch boundary orders the steps instead of a barrier. The pointers come in offset to their step.


@triton.jit
def forward_step_kernel(
    u_ptr,  # u_t
    w_ptr,
    b_ptr,
    prev_ptr,  # h_{t-1} (h0 at t = 0)
    offsets_ptr,  # offsets_t
    h_ptr,  # h_t, written
    B,
    N,
    slope_ptr,
    ACTIVATION: tl.constexpr,
    HAS_OFFSETS: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    forward_tile(
        u_ptr,
        w_ptr,
        b_ptr,
        prev_ptr,
        offsets_ptr,
        h_ptr,
        rows,
        rows < B,
        cols,
        N,
        tl.load(slope_ptr),
        ACTIVATION,
        HAS_OFFSETS,
        BLOCK_B,
        BLOCK_N,
    )


@triton.jit
def backward_step_kernel(
    grad_h_ptr,  # dL/dh_t from the layers above
    w_ptr,
    h_ptr,  # h_t
    offsets_ptr,  # offsets_t
    later_ptr,  # dL/dz_{t+1} (read only with HAS_LATER: not at the last step)
    grad_z_ptr,  # dL/dz_t, written
    total_ptr,  # dL/dh_t in total, written with WANT_TOTAL
    B,
    N,
    slope_ptr,
    ACTIVATION: tl.constexpr,
    HAS_OFFSETS: tl.constexpr,
    HAS_LATER: tl.constexpr,
    WANT_TOTAL: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    backward_tile(
        grad_h_ptr,
        w_ptr,
        h_ptr,
        offsets_ptr,
        later_ptr,
        grad_z_ptr,
        total_ptr,
        rows,
        rows < B,
        cols,
        N,
        tl.load(slope_ptr),
        HAS_LATER,
        ACTIVATION,
        HAS_OFFSETS,
        WANT_TOTAL,
        BLOCK_B,
        BLOCK_N,
    )
