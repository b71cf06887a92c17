// Capture of the generic ops: GEMM, normalisation, activations, elementwise, reductions, losses,
// attention and row moves. Each lowering mirrors its CPU kernel (cpu_gemm.cpp,
// cpu_elementwise.cpp, cpu_loss.cpp, cpu_attention.cpp, cpu_model_ops.cpp).
#include <cmath>
#include <numbers>

#include "backend/capture/capture_ops.h"
#include "perceiver/error.h"

namespace perceiver::capture {
namespace {

constexpr Elem F32 = Elem::kF32, F64 = Elem::kF64;

Dims mat(Transpose t, int64_t rows, int64_t cols) { return t == Transpose::kNo ? Dims{rows, cols} : Dims{cols, rows}; }

// C = alpha·op(A)·op(B) + beta·C, BLAS semantics (C is not read when beta == 0).
Value gemm_value(Lowering& L, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const Value& a,
                 const Value& b, float beta, Ref c, const Dims& c_dims, const Dims& c_strides) {
  Ops o{L.w};
  Value prod = k == 0 ? o.cf(0, {m, n})
                      : L.w.dot(a, b, {}, {}, {ta == Transpose::kNo ? 1 : 0}, {tb == Transpose::kNo ? 0 : 1});
  if (alpha != 1.f) prod = L.w.mul(o.cf(alpha, prod.shape), prod);
  if (beta == 0.f) return L.w.reshape(prod, c_dims);
  Value old = L.w.reshape(L.read(c, c_dims, c_strides), {m, n});
  if (beta != 1.f) old = L.w.mul(o.cf(beta, old.shape), old);
  return L.w.reshape(L.w.add(prod, old), c_dims);
}

void gemm(void* h, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  Recorder& r = recorder_of(h);
  const Ref ra = k ? r.ref(a, F32, "gemm") : Ref{}, rb = k ? r.ref(b, F32, "gemm") : Ref{}, rc = r.ref(c, F32, "gemm");
  r.op("gemm", [=](Lowering& L) {
    const Value A = k ? L.read(ra, mat(ta, m, k), {lda, 1}) : Value{};
    const Value B = k ? L.read(rb, mat(tb, k, n), {ldb, 1}) : Value{};
    L.write(rc, {m, n}, gemm_value(L, ta, tb, m, n, k, alpha, A, B, beta, rc, {m, n}, {ldc, 1}), {ldc, 1});
  }, {ra.buffer, rb.buffer, rc.buffer});
}

void gemm_batched(void* h, Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, int64_t stride_a, const float* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                  int64_t ldc, int64_t stride_c, int64_t batch) {
  // One problem at a time: the batch strides need not nest (a stride of 0 shares an operand).
  for (int64_t i = 0; i < batch; ++i)
    gemm(h, ta, tb, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb, beta, c + i * stride_c, ldc);
}

void layer_norm_forward(void* h, int64_t rows, int64_t cols, const float* x, const float* gamma, const float* beta,
                        double eps, float* y, float* mean, float* rstd) {
  Recorder& r = recorder_of(h);
  const Ref rx = r.ref(x, F32, "layer_norm_forward"), rg = r.ref(gamma, F32, "layer_norm_forward"),
            rb = r.ref(beta, F32, "layer_norm_forward"), ry = r.ref(y, F32, "layer_norm_forward"),
            rm = r.ref(mean, F32, "layer_norm_forward"), rs = r.ref(rstd, F32, "layer_norm_forward");
  r.op("layer_norm_forward", [=](Lowering& L) {
    Ops o{L.w};
    const Dims sh{rows, cols};
    const Value X = o.f64(L.read(rx, sh));
    const Value mu = L.w.div(o.row_sum(X), o.c(double(cols), F64, {rows}));
    const Value d = L.w.sub(X, o.per_row(mu, sh));
    const Value var = L.w.div(o.row_sum(L.w.mul(d, d)), o.c(double(cols), F64, {rows}));
    const Value rsd = L.w.div(o.c(1, F64, {rows}), L.w.unary("sqrt", L.w.add(var, o.c(eps, F64, {rows}))));
    const Value xhat = o.f32(L.w.mul(d, o.per_row(rsd, sh)));
    const Value out = L.w.add(L.w.mul(xhat, o.per_col(L.read(rg, {cols}), sh)), o.per_col(L.read(rb, {cols}), sh));
    L.write(ry, sh, out);
    L.write(rm, {rows}, o.f32(mu));
    L.write(rs, {rows}, o.f32(rsd));
  }, {rx.buffer, rg.buffer, rb.buffer, ry.buffer, rm.buffer, rs.buffer});
}

// dx += rstd·(g − mean(g) − x̂·mean(g·x̂)), g = dy·γ, in double; dγ += Σ dy·x̂; dβ += Σ dy.
void layer_norm_backward(void* h, int64_t rows, int64_t cols, const float* x, const float* gamma, const float* mean,
                         const float* rstd, const float* dy, float* dx, float* dgamma, float* dbeta) {
  Recorder& r = recorder_of(h);
  const char* op = "layer_norm_backward";
  const Ref rx = r.ref(x, F32, op), rg = r.ref(gamma, F32, op), rm = r.ref(mean, F32, op), rr = r.ref(rstd, F32, op),
            rdy = r.ref(dy, F32, op), rdx = r.ref(dx, F32, op), rdg = r.ref(dgamma, F32, op), rdb = r.ref(dbeta, F32, op);
  r.op(op, [=](Lowering& L) {
    Ops o{L.w};
    const Dims sh{rows, cols};
    const Value X = o.f64(L.read(rx, sh)), DY = o.f64(L.read(rdy, sh));
    const Value mu = o.per_row(o.f64(L.read(rm, {rows})), sh), rs = o.per_row(o.f64(L.read(rr, {rows})), sh);
    const Value G = L.w.mul(DY, o.per_col(o.f64(L.read(rg, {cols})), sh));
    const Value XH = L.w.mul(L.w.sub(X, mu), rs);
    const Value n = o.c(double(cols), F64, {rows});
    const Value mean_g = o.per_row(L.w.div(o.row_sum(G), n), sh);
    const Value mean_gx = o.per_row(L.w.div(o.row_sum(L.w.mul(G, XH)), n), sh);
    const Value d = o.f32(L.w.mul(rs, L.w.sub(L.w.sub(G, mean_g), L.w.mul(XH, mean_gx))));
    const Value old_dx = L.read(rdx, sh), old_dg = L.read(rdg, {cols}), old_db = L.read(rdb, {cols});
    L.write(rdx, sh, L.w.add(old_dx, d));
    L.write(rdg, {cols}, L.w.add(old_dg, o.f32(o.col_sum(L.w.mul(DY, XH)))));
    L.write(rdb, {cols}, L.w.add(old_db, o.f32(o.col_sum(DY))));
  }, {rx.buffer, rg.buffer, rm.buffer, rr.buffer, rdy.buffer, rdx.buffer, rdg.buffer, rdb.buffer});
}

Value softmax_rows(Ops& o, const Value& x) {
  const Dims last_bcast = [&] {
    Dims d;
    for (size_t i = 0; i + 1 < x.shape.size(); ++i) d.push_back(int64_t(i));
    return d;
  }();
  const Value m = o.w.broadcast(o.row_max(x), x.shape, last_bcast);
  const Value e = o.w.unary("exponential", o.w.sub(x, m));
  return o.w.div(e, o.w.broadcast(o.row_sum(e), x.shape, last_bcast));
}

void softmax_forward(void* h, int64_t rows, int64_t cols, const float* x, float* y) {
  Recorder& r = recorder_of(h);
  const Ref rx = r.ref(x, F32, "softmax_forward"), ry = r.ref(y, F32, "softmax_forward");
  r.op("softmax_forward", [=](Lowering& L) {
    Ops o{L.w};
    L.write(ry, {rows, cols}, softmax_rows(o, L.read(rx, {rows, cols})));
  }, {rx.buffer, ry.buffer});
}

void softmax_backward(void* h, int64_t rows, int64_t cols, const float* y, const float* dy, float* dx) {
  Recorder& r = recorder_of(h);
  const Ref ry = r.ref(y, F32, "softmax_backward"), rdy = r.ref(dy, F32, "softmax_backward"),
            rdx = r.ref(dx, F32, "softmax_backward");
  r.op("softmax_backward", [=](Lowering& L) {
    Ops o{L.w};
    const Dims sh{rows, cols};
    const Value Y = L.read(ry, sh), DY = L.read(rdy, sh);
    const Value dot = o.per_row(o.row_sum(L.w.mul(Y, DY)), sh);
    L.write(rdx, sh, L.w.add(L.read(rdx, sh), L.w.mul(Y, L.w.sub(DY, dot))));
  }, {ry.buffer, rdy.buffer, rdx.buffer});
}

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;

// tanh(√(2/π)·(x + 0.044715·x³)) as the CPU writes it (x.cube() = x·x·x).
Value gelu_tanh_inner(Ops& o, const Value& x) {
  const Value cube = o.w.mul(o.w.mul(x, x), x);
  const Value u = o.w.mul(o.cf(kSqrt2OverPi, x.shape), o.w.add(x, o.w.mul(o.cf(kGeluCubic, x.shape), cube)));
  return o.w.unary("tanh", u);
}

Value gelu_value(Ops& o, GeluKind kind, const Value& x) {
  const Value half = o.cf(0.5, x.shape), one = o.cf(1, x.shape);
  const Value inner = kind == GeluKind::kErf ? o.w.erf(o.w.mul(x, o.cf(std::numbers::sqrt2 / 2, x.shape)))
                                             : gelu_tanh_inner(o, x);
  return o.w.mul(o.w.mul(half, x), o.w.add(one, inner));
}

Value gelu_slope(Ops& o, GeluKind kind, const Value& x) {
  const Dims& s = x.shape;
  const Value half = o.cf(0.5, s), one = o.cf(1, s);
  if (kind == GeluKind::kErf) {
    const Value cdf = o.w.mul(half, o.w.add(one, o.w.erf(o.w.mul(x, o.cf(std::numbers::sqrt2 / 2, s)))));
    const Value pdf = o.w.unary("exponential", o.w.mul(o.cf(-0.5, s), o.w.mul(x, x)));
    const float inv_sqrt_2pi = float(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
    return o.w.add(cdf, o.w.mul(o.w.mul(x, pdf), o.cf(inv_sqrt_2pi, s)));
  }
  const Value t = gelu_tanh_inner(o, x);
  const Value a = o.w.mul(half, o.w.add(one, t));
  const Value b = o.w.mul(o.w.mul(o.w.mul(half, x), o.w.sub(one, o.w.mul(t, t))), o.cf(kSqrt2OverPi, s));
  return o.w.add(a, o.w.mul(b, o.w.add(one, o.w.mul(o.cf(3 * kGeluCubic, s), o.w.mul(x, x)))));
}

void gelu_forward(void* h, GeluKind kind, int64_t n, const float* x, float* y) {
  if (n == 0) return;
  Recorder& r = recorder_of(h);
  const Ref rx = r.ref(x, F32, "gelu_forward"), ry = r.ref(y, F32, "gelu_forward");
  r.op("gelu_forward", [=](Lowering& L) {
    Ops o{L.w};
    L.write(ry, {n}, gelu_value(o, kind, L.read(rx, {n})));
  }, {rx.buffer, ry.buffer});
}

void gelu_backward(void* h, GeluKind kind, int64_t n, const float* x, const float* dy, float* dx) {
  if (n == 0) return;
  Recorder& r = recorder_of(h);
  const Ref rx = r.ref(x, F32, "gelu_backward"), rdy = r.ref(dy, F32, "gelu_backward"),
            rdx = r.ref(dx, F32, "gelu_backward");
  r.op("gelu_backward", [=](Lowering& L) {
    Ops o{L.w};
    const Value g = L.w.mul(L.read(rdy, {n}), gelu_slope(o, kind, L.read(rx, {n})));
    L.write(rdx, {n}, L.w.add(L.read(rdx, {n}), g));
  }, {rx.buffer, rdy.buffer, rdx.buffer});
}

void bias_forward(void* h, int64_t rows, int64_t cols, const float* bias, float* y) {
  if (rows * cols == 0) return;
  Recorder& r = recorder_of(h);
  const Ref rb = r.ref(bias, F32, "bias_forward"), ry = r.ref(y, F32, "bias_forward");
  r.op("bias_forward", [=](Lowering& L) {
    Ops o{L.w};
    L.write(ry, {rows, cols}, L.w.add(L.read(ry, {rows, cols}), o.per_col(L.read(rb, {cols}), {rows, cols})));
  }, {rb.buffer, ry.buffer});
}

void bias_backward(void* h, int64_t rows, int64_t cols, const float* dy, float* dbias) {
  if (rows * cols == 0) return;
  Recorder& r = recorder_of(h);
  const Ref rdy = r.ref(dy, F32, "bias_backward"), rdb = r.ref(dbias, F32, "bias_backward");
  r.op("bias_backward", [=](Lowering& L) {
    Ops o{L.w};
    const Value s = o.f32(o.col_sum(o.f64(L.read(rdy, {rows, cols}))));
    L.write(rdb, {cols}, L.w.add(L.read(rdb, {cols}), s));
  }, {rdy.buffer, rdb.buffer});
}

void add(void* h, int64_t n, const float* a, const float* b, float* y) {
  if (n == 0) return;
  Recorder& r = recorder_of(h);
  const Ref ra = r.ref(a, F32, "add"), rb = r.ref(b, F32, "add"), ry = r.ref(y, F32, "add");
  r.op("add", [=](Lowering& L) { L.write(ry, {n}, L.w.add(L.read(ra, {n}), L.read(rb, {n}))); },
       {ra.buffer, rb.buffer, ry.buffer});
}

void axpy(void* h, int64_t n, float alpha, const float* x, float* y) {
  if (n == 0) return;
  Recorder& r = recorder_of(h);
  const Ref rx = r.ref(x, F32, "axpy"), ry = r.ref(y, F32, "axpy");
  r.op("axpy", [=](Lowering& L) {
    Ops o{L.w};
    L.write(ry, {n}, L.w.add(L.read(ry, {n}), L.w.mul(o.cf(alpha, {n}), L.read(rx, {n}))));
  }, {rx.buffer, ry.buffer});
}

void scale(void* h, int64_t n, float alpha, float* x) {
  if (n == 0) return;
  Recorder& r = recorder_of(h);
  const Ref rx = r.ref(x, F32, "scale");
  r.op("scale", [=](Lowering& L) {
    Ops o{L.w};
    L.write(rx, {n}, L.w.mul(L.read(rx, {n}), o.cf(alpha, {n})));
  }, {rx.buffer});
}

void fill(void* h, int64_t n, float value, float* x) {
  if (n == 0) return;
  Recorder& r = recorder_of(h);
  const Ref rx = r.ref(x, F32, "fill");
  r.op("fill", [=](Lowering& L) { L.write(rx, {n}, L.w.constant(value, F32, {n})); }, {rx.buffer});
}

void copy(void* h, int64_t n, const float* x, float* y) {
  if (n == 0) return;
  Recorder& r = recorder_of(h);
  const Ref rx = r.ref(x, F32, "copy"), ry = r.ref(y, F32, "copy");
  r.op("copy", [=](Lowering& L) { L.write(ry, {n}, L.read(rx, {n})); }, {rx.buffer, ry.buffer});
}

// A device double result: one element of an f64 buffer.
void put_double(Lowering& L, Ref out, const Value& scalar) { L.write(out, {1}, L.w.reshape(scalar, {1})); }

void sum(void* h, int64_t n, const float* x, double* out) {
  Recorder& r = recorder_of(h);
  const Ref ro = r.ref(out, F64, "sum"), rx = n ? r.ref(x, F32, "sum") : Ref{};
  r.op("sum", [=](Lowering& L) {
    Ops o{L.w};
    put_double(L, ro, n ? o.total(o.f64(L.read(rx, {n}))) : o.c(0, F64));
  }, {rx.buffer, ro.buffer});
}

void sum_squares(void* h, int64_t n, const float* x, double* out) {
  Recorder& r = recorder_of(h);
  const Ref ro = r.ref(out, F64, "sum_squares"), rx = n ? r.ref(x, F32, "sum_squares") : Ref{};
  r.op("sum_squares", [=](Lowering& L) {
    Ops o{L.w};
    if (!n) return put_double(L, ro, o.c(0, F64));
    const Value v = o.f64(L.read(rx, {n}));
    put_double(L, ro, o.total(L.w.mul(v, v)));
  }, {rx.buffer, ro.buffer});
}

void l1_forward(void* h, int64_t n, const float* pred, const float* target, double* out) {
  PCV_CHECK(n > 0, "L1 loss over zero elements");
  Recorder& r = recorder_of(h);
  const Ref rp = r.ref(pred, F32, "l1_forward"), rt = r.ref(target, F32, "l1_forward"), ro = r.ref(out, F64, "l1_forward");
  r.op("l1_forward", [=](Lowering& L) {
    Ops o{L.w};
    const Value d = L.w.unary("abs", L.w.sub(o.f64(L.read(rp, {n})), o.f64(L.read(rt, {n}))));
    put_double(L, ro, L.w.div(o.total(d), o.c(double(n), F64)));
  }, {rp.buffer, rt.buffer, ro.buffer});
}

void l1_backward(void* h, int64_t n, const float* pred, const float* target, double weight, float* dpred) {
  if (n == 0) return;
  Recorder& r = recorder_of(h);
  const Ref rp = r.ref(pred, F32, "l1_backward"), rt = r.ref(target, F32, "l1_backward"),
            rd = r.ref(dpred, F32, "l1_backward");
  r.op("l1_backward", [=](Lowering& L) {
    Ops o{L.w};
    const float g = float(weight / double(n));
    const Value d = L.w.sub(L.read(rp, {n}), L.read(rt, {n}));
    const Value zero = o.cf(0, {n});
    const Value step = L.w.select(L.w.compare("GT", d, zero), o.cf(g, {n}),
                                  L.w.select(L.w.compare("LT", d, zero), o.cf(-g, {n}), zero));
    L.write(rd, {n}, L.w.add(L.read(rd, {n}), step));
  }, {rp.buffer, rt.buffer, rd.buffer});
}

void mse_forward(void* h, int64_t n, const float* pred, const float* target, double* out) {
  PCV_CHECK(n > 0, "MSE loss over zero elements");
  Recorder& r = recorder_of(h);
  const Ref rp = r.ref(pred, F32, "mse_forward"), rt = r.ref(target, F32, "mse_forward"), ro = r.ref(out, F64, "mse_forward");
  r.op("mse_forward", [=](Lowering& L) {
    Ops o{L.w};
    const Value d = L.w.sub(o.f64(L.read(rp, {n})), o.f64(L.read(rt, {n})));
    put_double(L, ro, L.w.div(o.total(L.w.mul(d, d)), o.c(double(n), F64)));
  }, {rp.buffer, rt.buffer, ro.buffer});
}

void mse_backward(void* h, int64_t n, const float* pred, const float* target, double weight, float* dpred) {
  if (n == 0) return;
  Recorder& r = recorder_of(h);
  const Ref rp = r.ref(pred, F32, "mse_backward"), rt = r.ref(target, F32, "mse_backward"),
            rd = r.ref(dpred, F32, "mse_backward");
  r.op("mse_backward", [=](Lowering& L) {
    Ops o{L.w};
    const Value g = L.w.mul(o.cf(float(2.0 * weight / double(n)), {n}), L.w.sub(L.read(rp, {n}), L.read(rt, {n})));
    L.write(rd, {n}, L.w.add(L.read(rd, {n}), g));
  }, {rp.buffer, rt.buffer, rd.buffer});
}

// Row log-sum-exp in double and the one-hot of the labels, for cross-entropy.
struct CeRows {
  Value x, lse, onehot;  // [rows, cols] f64, [rows, cols] f64 (broadcast), [rows, cols] i1
};

CeRows ce_rows(Lowering& L, int64_t rows, int64_t cols, Ref logits, Ref labels) {
  Ops o{L.w};
  const Dims sh{rows, cols};
  CeRows c;
  c.x = o.f64(L.read(logits, sh));
  const Value m = o.row_max(c.x);
  const Value s = o.row_sum(L.w.unary("exponential", L.w.sub(c.x, o.per_row(m, sh))));
  c.lse = o.per_row(L.w.add(m, L.w.unary("log", s)), sh);
  c.onehot = L.w.compare("EQ", L.w.iota(sh, 1, Elem::kI64), o.per_row(L.read(labels, {rows}), sh));
  return c;
}

void softmax_ce_forward(void* h, int64_t rows, int64_t cols, const float* logits, const int64_t* labels, double* out) {
  PCV_CHECK(rows > 0 && cols > 0, "cross-entropy over an empty batch");
  Recorder& r = recorder_of(h);
  const Ref rl = r.ref(logits, F32, "softmax_ce_forward"), ry = r.ref(labels, Elem::kI64, "softmax_ce_forward"),
            ro = r.ref(out, F64, "softmax_ce_forward");
  r.op("softmax_ce_forward", [=](Lowering& L) {
    Ops o{L.w};
    const CeRows c = ce_rows(L, rows, cols, rl, ry);
    const Value picked = o.row_sum(L.w.select(c.onehot, c.x, o.c(0, F64, {rows, cols})));
    const Value lse = L.w.slice(c.lse, {0, 0}, {rows, 1});
    const Value per_row = L.w.sub(L.w.reshape(lse, {rows}), picked);
    put_double(L, ro, L.w.div(o.total(per_row), o.c(double(rows), F64)));
  }, {rl.buffer, ry.buffer, ro.buffer});
}

void softmax_ce_backward(void* h, int64_t rows, int64_t cols, const float* logits, const int64_t* labels,
                         double weight, float* dlogits) {
  Recorder& r = recorder_of(h);
  const Ref rl = r.ref(logits, F32, "softmax_ce_backward"), ry = r.ref(labels, Elem::kI64, "softmax_ce_backward"),
            rd = r.ref(dlogits, F32, "softmax_ce_backward");
  r.op("softmax_ce_backward", [=](Lowering& L) {
    Ops o{L.w};
    const Dims sh{rows, cols};
    const CeRows c = ce_rows(L, rows, cols, rl, ry);
    const Value p = L.w.unary("exponential", L.w.sub(c.x, c.lse));
    const Value hot = L.w.select(c.onehot, o.c(1, F64, sh), o.c(0, F64, sh));
    const Value g = o.f32(L.w.mul(o.c(weight / double(rows), F64, sh), L.w.sub(p, hot)));
    L.write(rd, sh, L.w.add(L.read(rd, sh), g));
  }, {rl.buffer, ry.buffer, rd.buffer});
}

// ---- attention ------------------------------------------------------------------------------
// Q [B,Nq,H,dqk], K [B,Nk,H,dqk], V [B,Nk,H,dv]; scores S [B,H,Nq,Nk] = scale·Q·Kᵀ per (b, h).
// The streamed kernel's online softmax is the same function of S; XLA schedules the memory.

struct Heads {
  Value q, k, v;
};

Heads read_heads(Lowering& L, const AttentionDims& d, Ref q, Ref k, Ref v) {
  return {L.read(q, {d.batch, d.nq, d.heads, d.dqk}), L.read(k, {d.batch, d.nk, d.heads, d.dqk}),
          L.read(v, {d.batch, d.nk, d.heads, d.dv})};
}

Value scores(Lowering& L, const AttentionDims& d, const Heads& x) {
  Ops o{L.w};
  const Value s = L.w.dot(x.q, x.k, {0, 2}, {0, 2}, {3}, {3});  // [B,H,Nq,Nk]
  return L.w.mul(o.cf(d.scale, s.shape), s);
}

// P [B,H,Nq,Nk] · V → O in the [B,Nq,H·dv] layout.
Value attend(Lowering& L, const Value& p, const Value& v) {
  const Value o = L.w.dot(p, v, {0, 1}, {0, 2}, {3}, {1});  // [B,H,Nq,dv]
  return L.w.transpose(o, {0, 2, 1, 3});
}

void refuse_dropout(const AttentionDims& d) {
  PCV_CHECK(!d.dropout(), "capture: attention dropout (p = ", d.dropout_p, ") cannot be captured: its Philox masks ",
            "have no XLA lowering here. HINT: set attention_probs_dropout_prob to 0 for a compiled (Neuron) step");
}

void attention_forward(void* h, const AttentionDims& d, const float* q, const float* k, const float* v, float* o,
                       float* saved) {
  refuse_dropout(d);
  PCV_CHECK(!d.continues && !d.key_range(), "attention: this backend does not merge calls over key ranges "
            "(merges_attention_chunks)");
  Recorder& r = recorder_of(h);
  const char* op = "attention_forward";
  const Ref rq = r.ref(q, F32, op), rk = r.ref(k, F32, op), rv = r.ref(v, F32, op), ro = r.ref(o, F32, op),
            rs = r.ref(saved, F32, op);
  r.op(op, [=](Lowering& L) {
    Ops x{L.w};
    const Heads hd = read_heads(L, d, rq, rk, rv);
    const Value s = scores(L, d, hd);
    const Dims lead{0, 1, 2};
    if (!d.streamed()) {
      const Value p = softmax_rows(x, s);
      L.write(ro, {d.batch, d.nq, d.heads, d.dv}, attend(L, p, hd.v));
      L.write(rs, p.shape, p);
      return;
    }
    const Value m = x.row_max(s);  // [B,H,Nq]
    const Value e = L.w.unary("exponential", L.w.sub(s, L.w.broadcast(m, s.shape, lead)));
    const Value l = x.row_sum(e);
    const Value p = L.w.div(e, L.w.broadcast(l, s.shape, lead));
    L.write(ro, {d.batch, d.nq, d.heads, d.dv}, attend(L, p, hd.v));
    L.write(rs, m.shape, L.w.add(m, L.w.unary("log", l)));
  }, {rq.buffer, rk.buffer, rv.buffer, ro.buffer, rs.buffer});
}

// dV += Pᵀ·dO, dP = dO·Vᵀ, dS = P ⊙ (dP − rowsum(dP ⊙ P))·scale, dQ += dS·K, dK += dSᵀ·Q.
void attention_backward(void* h, const AttentionDims& d, const float* q, const float* k, const float* v,
                        const float* o, const float* saved, const float* dout, float* dq, float* dk, float* dv) {
  refuse_dropout(d);
  PCV_CHECK(!d.kv_grad_in_place || (d.streamed() && dk == k && dv == v),
            "attention: kv_grad_in_place needs the streamed kernel and dk == k, dv == v");
  PCV_CHECK(!d.key_range(), "attention: this backend does not run a backward over a key range (merges_attention_chunks)");
  Recorder& r = recorder_of(h);
  const char* op = "attention_backward";
  const Ref rq = r.ref(q, F32, op), rk = r.ref(k, F32, op), rv = r.ref(v, F32, op), ro = r.ref(o, F32, op),
            rs = r.ref(saved, F32, op), rdo = r.ref(dout, F32, op), rdq = r.ref(dq, F32, op), rdk = r.ref(dk, F32, op),
            rdv = r.ref(dv, F32, op);
  r.op(op, [=](Lowering& L) {
    Ops x{L.w};
    const Heads hd = read_heads(L, d, rq, rk, rv);
    const Value dO = L.read(rdo, {d.batch, d.nq, d.heads, d.dv});
    const Dims lead{0, 1, 2};
    Value p, delta;  // P [B,H,Nq,Nk]; rowsum(dP ⊙ P) [B,H,Nq]
    const Value dp = L.w.dot(dO, hd.v, {0, 2}, {0, 2}, {3}, {3});  // [B,H,Nq,Nk]
    if (!d.streamed()) {
      p = L.read(rs, {d.batch, d.heads, d.nq, d.nk});
      delta = x.f32(x.row_sum(L.w.mul(x.f64(dp), x.f64(p))));  // summed in double, as the CPU
    } else {
      const Value lse = L.read(rs, {d.batch, d.heads, d.nq});
      p = L.w.unary("exponential", L.w.sub(scores(L, d, hd), L.w.broadcast(lse, {d.batch, d.heads, d.nq, d.nk}, lead)));
      const Value O = L.read(ro, {d.batch, d.nq, d.heads, d.dv});
      delta = L.w.transpose(x.row_sum(L.w.mul(dO, O)), {0, 2, 1});  // Σ_j dO·O per (b, h, row)
    }
    const Value ds = L.w.mul(L.w.mul(p, L.w.sub(dp, L.w.broadcast(delta, p.shape, lead))), x.cf(d.scale, p.shape));
    const Value dv_new = L.w.transpose(L.w.dot(p, dO, {0, 1}, {0, 2}, {2}, {1}), {0, 2, 1, 3});      // [B,Nk,H,dv]
    const Value dq_new = L.w.transpose(L.w.dot(ds, hd.k, {0, 1}, {0, 2}, {3}, {1}), {0, 2, 1, 3});   // [B,Nq,H,dqk]
    const Value dk_new = L.w.transpose(L.w.dot(ds, hd.q, {0, 1}, {0, 2}, {2}, {1}), {0, 2, 1, 3});   // [B,Nk,H,dqk]
    const Dims qd{d.batch, d.nq, d.heads, d.dqk}, kd{d.batch, d.nk, d.heads, d.dqk}, vd{d.batch, d.nk, d.heads, d.dv};
    const Value old_dq = L.read(rdq, qd);
    const Value old_dk = d.kv_grad_in_place ? Value{} : L.read(rdk, kd);
    const Value old_dv = d.kv_grad_in_place ? Value{} : L.read(rdv, vd);
    L.write(rdq, qd, L.w.add(old_dq, dq_new));
    L.write(rdk, kd, d.kv_grad_in_place ? dk_new : L.w.add(old_dk, dk_new));  // in place: "=" over K
    L.write(rdv, vd, d.kv_grad_in_place ? dv_new : L.w.add(old_dv, dv_new));
  }, {rq.buffer, rk.buffer, rv.buffer, ro.buffer, rs.buffer, rdo.buffer, rdq.buffer, rdk.buffer, rdv.buffer});
}

// ---- rows -----------------------------------------------------------------------------------

void gather_rows(void* h, int64_t batch, int64_t rows, int64_t cols, int64_t row0, int64_t n, const float* src,
                 float* dst) {
  if (batch * n * cols == 0) return;
  Recorder& r = recorder_of(h);
  const Ref rs = r.ref(src + row0 * cols, F32, "gather_rows"), rd = r.ref(dst, F32, "gather_rows");
  r.op("gather_rows", [=](Lowering& L) {
    L.write(rd, {batch, n, cols}, L.read(rs, {batch, n, cols}, {rows * cols, cols, 1}));
  }, {rs.buffer, rd.buffer});
}

void scatter_add_rows(void* h, int64_t batch, int64_t rows, int64_t cols, int64_t row0, int64_t n, const float* src,
                      float* dst) {
  if (batch * n * cols == 0) return;
  Recorder& r = recorder_of(h);
  const Ref rs = r.ref(src, F32, "scatter_add_rows"), rd = r.ref(dst + row0 * cols, F32, "scatter_add_rows");
  r.op("scatter_add_rows", [=](Lowering& L) {
    const Dims sh{batch, n, cols}, st{rows * cols, cols, 1};
    L.write(rd, sh, L.w.add(L.read(rd, sh, st), L.read(rs, sh)), st);
  }, {rs.buffer, rd.buffer});
}

void broadcast_rows(void* h, int64_t batch, int64_t n, const float* src, float* dst) {
  if (batch * n == 0) return;
  Recorder& r = recorder_of(h);
  const Ref rs = r.ref(src, F32, "broadcast_rows"), rd = r.ref(dst, F32, "broadcast_rows");
  r.op("broadcast_rows", [=](Lowering& L) {
    L.write(rd, {batch, n}, L.w.broadcast(L.read(rs, {n}), {batch, n}, {1}));
  }, {rs.buffer, rd.buffer});
}

}  // namespace

void fill_generic_ops(KernelTable<float>& t) {
  t.gemm = gemm;
  t.gemm_batched = gemm_batched;
  t.layer_norm_forward = layer_norm_forward;
  t.layer_norm_backward = layer_norm_backward;
  t.softmax_forward = softmax_forward;
  t.softmax_backward = softmax_backward;
  t.gelu_forward = gelu_forward;
  t.gelu_backward = gelu_backward;
  t.bias_forward = bias_forward;
  t.bias_backward = bias_backward;
  t.add = add;
  t.axpy = axpy;
  t.scale = scale;
  t.fill = fill;
  t.copy = copy;
  t.sum = sum;
  t.sum_squares = sum_squares;
  t.l1_forward = l1_forward;
  t.l1_backward = l1_backward;
  t.mse_forward = mse_forward;
  t.mse_backward = mse_backward;
  t.softmax_ce_forward = softmax_ce_forward;
  t.softmax_ce_backward = softmax_ce_backward;
  t.attention_forward = attention_forward;
  t.attention_backward = attention_backward;
  t.gather_rows = gather_rows;
  t.scatter_add_rows = scatter_add_rows;
  t.broadcast_rows = broadcast_rows;
}

const KernelTable<float>& capture_table() {
  static const KernelTable<float> table = [] {
    KernelTable<float> t;
    fill_generic_ops(t);
    fill_model_ops(t);
    check_complete(t, "capture");
    return t;
  }();
  return table;
}

}  // namespace perceiver::capture
