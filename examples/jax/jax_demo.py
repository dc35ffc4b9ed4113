"""examples/jax/jax_demo.py: C++ kernels inside jax.jit with kffi.jax.

Builds two small CPU kernels with kffi.cpp.load_inline, then:
  1. calls one inside jax.jit with kffi.jax.call (out_shapes names the output parameter y);
  2. registers it as an XLA FFI target and calls it with jax.ffi.ffi_call;
  3. makes it differentiable with a backward kernel (kffi.jax.primitive, vjp=...);
  4. batches it with jax.vmap.

Usage: python3 examples/jax/jax_demo.py   (CPU; on a CUDA machine the same calls work with GPU
kernels, registered with platform="gpu")
"""
# SPDX-License-Identifier: Apache-2.0

import jax
import jax.numpy as jnp
import kffi
import kffi.jax
import numpy as np

SOURCE = r"""
// y = x * x
void square(kffi::ConstTensorView x, kffi::TensorView y) {
  const float* a = x.data<float>();
  float* b = y.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) b[i] = a[i] * a[i];
}
// dx = 2 x g: the gradient of square
void square_bwd(kffi::ConstTensorView x, kffi::ConstTensorView g, kffi::TensorView dx) {
  const float* a = x.data<float>();
  const float* c = g.data<float>();
  float* d = dx.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) d[i] = 2 * a[i] * c[i];
}
"""


def main():
    mod = kffi.cpp.load_inline("jax_demo", cpp_sources=SOURCE, functions=["square", "square_bwd"])
    # These are host kernels: keep JAX on its CPU device even where a GPU is its default.
    jax.config.update("jax_default_device", jax.devices("cpu")[0])
    x = jnp.linspace(-2.0, 2.0, 5, dtype=jnp.float32)
    like_x = jax.ShapeDtypeStruct(x.shape, x.dtype)

    # 1. A kffi function as a JAX operation: eager, or traced by jax.jit.
    @jax.jit
    def f(a):
        return kffi.jax.call(mod.square, a, out_shapes={"y": like_x}) + 1.0

    print("square(x) + 1        ", f(x))

    # 2. The same function as an XLA FFI target, called the way jax.ffi documents.
    kffi.jax.register_ffi_target("demo_square", mod.square)
    y = jax.jit(jax.ffi.ffi_call("demo_square", like_x))(x)
    print("ffi_call square(x)   ", y)

    # 3. Differentiable, with the backward pass another kernel.
    square = kffi.jax.primitive(
        mod.square, out_shapes={"y": like_x}, vjp=(None, mod.square_bwd), vmap="sequential"
    )
    grad = jax.grad(lambda a: square(a).sum())(x)
    print("d/dx sum(square(x))  ", grad)
    np.testing.assert_allclose(grad, 2 * np.asarray(x))

    # 4. Batched (one kernel call per row).
    batch = jnp.stack([x, 2 * x])
    print("vmap(square)         ", jax.vmap(square)(batch))
    np.testing.assert_allclose(jax.vmap(square)(batch), np.asarray(batch) ** 2)
    print("ok")


if __name__ == "__main__":
    main()
