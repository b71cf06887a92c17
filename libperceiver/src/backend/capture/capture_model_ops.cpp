// Capture of the model's ops (the multimodal input array, decoder queries, targets) and of the
// optimizer ops, mirroring cpu_model_ops.cpp and cpu_optim.cpp. Runtime indices (labels, output
// points, masks) are inputs of the graph: one-hots, gathers and selects; everything else is
// static slicing. The optimizer's learning rate and step count are lifted to scalar arguments.
#include <cmath>
#include <cstring>

#include "backend/capture/capture_ops.h"
#include "perceiver/error.h"

namespace perceiver::capture {
namespace {

constexpr Elem F32 = Elem::kF32, F64 = Elem::kF64, I64 = Elem::kI64;

Value bcast_row(Lowering& L, Ref r, int64_t width, const Dims& shape3) {  // [width] → [B, n, width]
  return L.w.broadcast(L.read(r, {width}), shape3, {2});
}

// ---- the multimodal input array (EmbedDims) -------------------------------------------------

struct EmbedRefs {
  Ref video, audio, labels, mask, pos_audio, pos_image, pad_audio, pad_image, pad_label, mask_audio, mask_image,
      mask_label;
};

Value audio_tokens(Lowering& L, const EmbedDims& d, const EmbedRefs& r) {
  const int64_t B = d.batch, A = d.audio_tokens, C = d.channels, spp = d.samples_per_patch;
  const Value samples = L.read(r.audio, {B, A, spp}, {d.audio_samples, spp, 1});
  const Value pos = L.w.broadcast(L.read(r.pos_audio, {A, d.audio_pos}), {B, A, d.audio_pos}, {1, 2});
  const int64_t pad = C - spp - d.audio_pos;
  return L.w.concat({samples, pos, bcast_row(L, r.pad_audio, pad, {B, A, pad})}, 2);
}

// Space-to-depth: token (t, h, w) holds video[t·dt+i, h·sd+j, w·sd+k, c] in (i, j, k, c) order.
Value image_tokens(Lowering& L, const EmbedDims& d, const EmbedRefs& r) {
  const int64_t B = d.batch, I = d.image_tokens, C = d.channels, sd = d.spatial_downsample, dt = d.temporal_downsample;
  const int64_t gt = I / (d.grid_h() * d.grid_w()), clip = d.frames * d.height * d.width * 3;
  const Value v = L.read(r.video, {B, gt * dt * d.height * d.width * 3}, {clip, 1});
  const Value split = L.w.reshape(v, {B, gt, dt, d.grid_h(), sd, d.grid_w(), sd, 3});
  const Value patches = L.w.reshape(L.w.transpose(split, {0, 1, 3, 5, 2, 4, 6, 7}), {B, I, d.patch_values()});
  const Value pos = L.w.broadcast(L.read(r.pos_image, {I, d.image_pos}), {B, I, d.image_pos}, {1, 2});
  const int64_t pad = C - d.patch_values() - d.image_pos;
  return L.w.concat({patches, pos, bcast_row(L, r.pad_image, pad, {B, I, pad})}, 2);
}

Value label_token(Lowering& L, const EmbedDims& d, const EmbedRefs& r) {
  const int64_t B = d.batch, N = d.num_labels, C = d.channels;
  const Value labels = L.w.broadcast(L.read(r.labels, {B}), {B, N}, {0});
  const Value hot = L.w.compare("EQ", L.w.iota({B, N}, 1, I64), labels);
  const Value onehot = L.w.select(hot, L.w.constant(1, F32, {B, N}), L.w.constant(0, F32, {B, N}));
  return L.w.concat({L.w.reshape(onehot, {B, 1, N}), bcast_row(L, r.pad_label, C - N, {B, 1, C - N})}, 2);
}

// Rows [row0, row0+n) of x: the whole [B·M, C] array lowered, then sliced (XLA's simplifier
// narrows the slice to the pieces it needs).
void embed_forward(void* h, const EmbedDims& d, const EmbedArgs<float>& a, int64_t row0, int64_t n, float* x_rows) {
  Recorder& rec = recorder_of(h);
  const char* op = "embed_forward";
  EmbedRefs r{rec.ref(a.video, F32, op),      rec.ref(a.audio, F32, op),      rec.ref(a.labels, I64, op),
              rec.ref(a.mask, Elem::kU8, op), rec.ref(a.pos_audio, F32, op),  rec.ref(a.pos_image, F32, op),
              rec.ref(a.pad_audio, F32, op),  rec.ref(a.pad_image, F32, op),  rec.ref(a.pad_label, F32, op),
              rec.ref(a.mask_audio, F32, op), rec.ref(a.mask_image, F32, op), rec.ref(a.mask_label, F32, op)};
  const Ref rx = rec.ref(x_rows, F32, op);
  rec.op(op, [=](Lowering& L) {
    const int64_t B = d.batch, M = d.tokens, C = d.channels, A = d.audio_tokens, I = d.image_tokens;
    const Value tokens = L.w.concat({audio_tokens(L, d, r), image_tokens(L, d, r), label_token(L, d, r)}, 1);
    const Value mask_tokens = L.w.concat({bcast_row(L, r.mask_audio, C, {B, A, C}), bcast_row(L, r.mask_image, C, {B, I, C}),
                                          bcast_row(L, r.mask_label, C, {B, 1, C})},
                                         1);
    const Value bits = L.w.compare("NE", L.read(r.mask, {B, M}), L.w.constant(0, Elem::kU8, {B, M}));
    const Value x = L.w.reshape(L.w.select(L.w.broadcast(bits, {B, M, C}, {0, 1}), mask_tokens, tokens), {B * M, C});
    L.write(rx, {n, C}, n == B * M ? x : L.w.slice(x, {row0, 0}, {row0 + n, C}));
  }, {r.video.buffer, r.audio.buffer, r.labels.buffer, r.mask.buffer, r.pos_audio.buffer, r.pos_image.buffer,
      r.pad_audio.buffer, r.pad_image.buffer, r.pad_label.buffer, r.mask_audio.buffer, r.mask_image.buffer,
      r.mask_label.buffer, rx.buffer});
}

// Rows [row0, row0+n) of dx [B·M, C]: per modality, masked rows add their whole row to the mask
// token's gradient, unmasked rows their padding columns to the padding's (sums in double).
void embed_backward_rows(void* h, const EmbedDims& d, const uint8_t* mask, int64_t row0, int64_t n,
                         const float* dx_rows, const EmbedGrads<float>& g) {
  if (n == 0) return;
  Recorder& rec = recorder_of(h);
  const char* op = "embed_backward_rows";
  const Ref rm = rec.ref(mask + row0, Elem::kU8, op), rdx = rec.ref(dx_rows, F32, op);
  const Ref pads[3] = {rec.ref(g.pad_audio, F32, op), rec.ref(g.pad_image, F32, op), rec.ref(g.pad_label, F32, op)};
  const Ref masks[3] = {rec.ref(g.mask_audio, F32, op), rec.ref(g.mask_image, F32, op), rec.ref(g.mask_label, F32, op)};
  rec.op(op, [=](Lowering& L) {
    Ops o{L.w};
    const int64_t C = d.channels, M = d.tokens;
    const int64_t pad_from[3] = {d.samples_per_patch + d.audio_pos, d.patch_values() + d.image_pos, d.num_labels};
    const int64_t bounds[4] = {0, d.audio_tokens, d.label_begin(), M};
    const Value dx = o.f64(L.read(rdx, {n, C}));
    const Value masked = L.w.compare("NE", L.read(rm, {n}), L.w.constant(0, Elem::kU8, {n}));
    const Value tok = L.w.binary("remainder", L.w.add(L.w.iota({n}, 0, I64), o.c(double(row0), I64, {n})),
                                 o.c(double(M), I64, {n}));
    const Value one = o.c(1, F64, {n}), zero = o.c(0, F64, {n});
    for (int m = 0; m < 3; ++m) {
      const Value in_m = L.w.binary("and", L.w.compare("GE", tok, o.c(double(bounds[m]), I64, {n})),
                                    L.w.compare("LT", tok, o.c(double(bounds[m + 1]), I64, {n})));
      const Value wm = L.w.select(L.w.binary("and", in_m, masked), one, zero);
      const Value wp = L.w.select(L.w.binary("and", in_m, L.w.unary("not", masked)), one, zero);
      const Value sm = o.f32(L.w.dot(wm, dx, {}, {}, {0}, {0}));  // [C]
      const Value sp = o.f32(L.w.slice(L.w.dot(wp, dx, {}, {}, {0}, {0}), {pad_from[m]}, {C}));
      L.write(masks[m], {C}, L.w.add(L.read(masks[m], {C}), sm));
      if (C > pad_from[m]) L.write(pads[m], {C - pad_from[m]}, L.w.add(L.read(pads[m], {C - pad_from[m]}), sp));
    }
  }, {rm.buffer, rdx.buffer, pads[0].buffer, pads[1].buffer, pads[2].buffer, masks[0].buffer, masks[1].buffer,
      masks[2].buffer});
}

// ---- decoder queries (QueryDims) ------------------------------------------------------------

// The Fourier features of runtime points [P] from per-axis tables: [pos (d) | sin (d·K) | cos (d·K)].
Value fourier_rows(Lowering& L, const FourierAxes& ax, const Value& points, const Ref* tables) {
  Ops o{L.w};
  const int64_t P = points.shape[0], K = ax.bands, tw = 1 + 2 * K;
  std::vector<Value> rows(size_t(ax.d));
  Value rest = points;
  for (int64_t j = ax.d - 1; j >= 0; --j) {  // coordinates, last axis fastest
    const Value dim = o.c(double(ax.dims[j]), I64, {P});
    const Value coord = L.w.binary("remainder", rest, dim);
    rest = L.w.div(rest, dim);
    rows[size_t(j)] = L.w.take_rows(L.read(tables[j], {ax.dims[j], tw}), coord);  // [P, tw]
  }
  std::vector<Value> pos, sin, cos;
  for (const Value& r : rows) {
    pos.push_back(L.w.slice(r, {0, 0}, {P, 1}));
    sin.push_back(L.w.slice(r, {0, 1}, {P, 1 + K}));
    cos.push_back(L.w.slice(r, {0, 1 + K}, {P, tw}));
  }
  std::vector<Value> parts = pos;
  parts.insert(parts.end(), sin.begin(), sin.end());
  parts.insert(parts.end(), cos.begin(), cos.end());
  return L.w.concat(parts, 1);
}

Value point_rows(Lowering& L, const FourierAxes& ax, Ref points, int64_t P, const Ref* tables, Ref pad, int64_t E) {
  const Value f = fourier_rows(L, ax, L.read(points, {P}), tables);
  const int64_t w = ax.width();
  return L.w.concat({f, L.w.broadcast(L.read(pad, {E - w}), {P, E - w}, {1})}, 1);
}

void queries_forward(void* h, const QueryDims& d, const QueryArgs<float>& a, float* q) {
  Recorder& rec = recorder_of(h);
  const char* op = "queries_forward";
  const int64_t na = d.num_audio, ni = d.num_image, E = d.channels, lc = d.label_channels;
  const Ref ap = na ? rec.ref(a.audio_points, I64, op) : Ref{}, ip = ni ? rec.ref(a.image_points, I64, op) : Ref{};
  const Ref at[1] = {rec.ref(a.audio_axis, F32, op)};
  const Ref it[3] = {rec.ref(a.image_axes[0], F32, op), rec.ref(a.image_axes[1], F32, op), rec.ref(a.image_axes[2], F32, op)};
  const Ref pa = rec.ref(a.pad_audio, F32, op), pi = rec.ref(a.pad_image, F32, op), pl = rec.ref(a.pad_label, F32, op),
            lq = rec.ref(a.label_query, F32, op), rq = rec.ref(q, F32, op);
  rec.op(op, [=](Lowering& L) {
    std::vector<Value> rows;
    if (na) rows.push_back(point_rows(L, d.audio, ap, na, at, pa, E));
    if (ni) rows.push_back(point_rows(L, d.image, ip, ni, it, pi, E));
    rows.push_back(L.w.reshape(L.w.concat({L.read(lq, {lc}), L.read(pl, {E - lc})}, 0), {1, E}));
    const Value one = L.w.concat(rows, 0);  // [O, E]
    L.write(rq, {d.batch, d.rows(), E}, L.w.broadcast(one, {d.batch, d.rows(), E}, {1, 2}));
  }, {ap.buffer, ip.buffer, at[0].buffer, it[0].buffer, it[1].buffer, it[2].buffer, pa.buffer, pi.buffer, pl.buffer,
      lq.buffer, rq.buffer});
}

void queries_backward(void* h, const QueryDims& d, const float* dq, const QueryGrads<float>& g) {
  Recorder& rec = recorder_of(h);
  const char* op = "queries_backward";
  const Ref rdq = rec.ref(dq, F32, op), pa = rec.ref(g.pad_audio, F32, op), pi = rec.ref(g.pad_image, F32, op),
            pl = rec.ref(g.pad_label, F32, op), lq = rec.ref(g.label_query, F32, op);
  rec.op(op, [=](Lowering& L) {
    Ops o{L.w};
    const int64_t B = d.batch, O = d.rows(), E = d.channels, na = d.num_audio, ni = d.num_image;
    const Value all = o.f64(L.read(rdq, {B, O, E}));
    // Rows [row0, row0+n) of every batch item, columns [from, E) or [from, from+width), summed in double.
    auto add_sum = [&](Ref out, int64_t row0, int64_t n, int64_t from, int64_t width) {
      if (width == 0) return;
      const Value s = L.w.reduce(L.w.slice(all, {0, row0, from}, {B, row0 + n, from + width}), {0, 1}, "add");
      L.write(out, {width}, L.w.add(L.read(out, {width}), o.f32(s)));
    };
    const int64_t wa = d.audio.width(), wi = d.image.width(), lc = d.label_channels;
    add_sum(pa, 0, na, wa, E - wa);
    add_sum(pi, na, ni, wi, E - wi);
    add_sum(pl, O - 1, 1, lc, E - lc);
    add_sum(lq, O - 1, 1, 0, lc);
  }, {rdq.buffer, pa.buffer, pi.buffer, pl.buffer, lq.buffer});
}

// Pixels of the image points [B, Pi, 3] and samples of the audio points [B, Pa·spp].
void gather_targets(void* h, const TargetDims& d, const int64_t* image_points, const int64_t* audio_points,
                    const float* video, const float* audio, float* image_targets, float* audio_targets) {
  Recorder& rec = recorder_of(h);
  const char* op = "gather_targets";
  const int64_t B = d.batch, pi = d.num_image, pa = d.num_audio, spp = d.samples_per_patch;
  const Ref ip = pi ? rec.ref(image_points, I64, op) : Ref{}, ap = pa ? rec.ref(audio_points, I64, op) : Ref{};
  const Ref rv = rec.ref(video, F32, op), ra = rec.ref(audio, F32, op);
  const Ref ri = pi ? rec.ref(image_targets, F32, op) : Ref{}, rt = pa ? rec.ref(audio_targets, F32, op) : Ref{};
  rec.op(op, [=](Lowering& L) {
    if (pi) {
      const Value pixels = L.w.transpose(L.read(rv, {B, d.pixels, 3}), {1, 0, 2});  // [pixels, B, 3]
      const Value picked = L.w.take_rows(pixels, L.read(ip, {pi}));                 // [Pi, B, 3]
      L.write(ri, {B, pi, 3}, L.w.transpose(picked, {1, 0, 2}));
    }
    if (pa) {
      const int64_t patches = d.audio_samples / spp;
      const Value p = L.w.transpose(L.read(ra, {B, patches, spp}, {d.audio_samples, spp, 1}), {1, 0, 2});
      const Value picked = L.w.take_rows(p, L.read(ap, {pa}));  // [Pa, B, spp]
      L.write(rt, {B, pa, spp}, L.w.transpose(picked, {1, 0, 2}));
    }
  }, {ip.buffer, ap.buffer, rv.buffer, ra.buffer, ri.buffer, rt.buffer});
}

// ---- clipping and optimizers ----------------------------------------------------------------

Value read_double(Lowering& L, Ref r) { return L.w.reshape(L.read(r, {1}), {}); }

void clip_by_global_norm(void* h, int64_t n, float* x, const double* sumsq, double max_norm, double* clipped) {
  Recorder& rec = recorder_of(h);
  const char* op = "clip_by_global_norm";
  const Ref rx = rec.ref(x, F32, op), rs = rec.ref(sumsq, F64, op), rc = rec.ref(clipped, F64, op);
  rec.op(op, [=](Lowering& L) {
    Ops o{L.w};
    const Value norm = L.w.unary("sqrt", read_double(L, rs));
    const Value clip = L.w.binary("and", L.w.is_finite(norm), L.w.unary("not", L.w.compare("LT", norm, o.c(max_norm, F64))));
    const Value X = L.read(rx, {n});
    const Value scaled = L.w.mul(L.w.div(X, o.all(o.f32(norm), {n})), o.cf(max_norm, {n}));
    L.write(rx, {n}, L.w.select(clip, scaled, X));
    L.write(rc, {1}, L.w.reshape(L.w.select(clip, o.c(1, F64), o.c(0, F64)), {1}));
  }, {rx.buffer, rs.buffer, rc.buffer});
}

// Contiguous element ranges of the arenas with one weight-decay flag (runs of OptimChunks), or
// one tensor each (LAMB's trust ratio is per tensor).
struct Span {
  int64_t begin, end;
  bool decayed;
};

std::vector<Span> spans(const std::vector<OptimChunk>& chunks, bool per_tensor) {
  std::vector<Span> out;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const OptimChunk& c = chunks[i];
    const bool joins = !out.empty() && out.back().end == c.begin && out.back().decayed == bool(c.decayed) &&
                       (!per_tensor || chunks[i - 1].tensor == c.tensor);
    if (joins) out.back().end = c.end;
    else out.push_back({c.begin, c.end, bool(c.decayed)});
  }
  return out;
}

// The optimizer step as recorded: the chunk list is static (read from the recorder's memory,
// where the optimizer uploaded it once); lr and t become scalar arguments.
struct OptimRefs {
  std::vector<OptimChunk> chunks;
  Ref params, grads, s0, s1, sumsq;
  OptimStep step;
};

OptimRefs optim_refs(Recorder& rec, const OptimStep& s, const float* p, const float* g, const float* a, const float* b,
                     const char* op) {
  OptimRefs r;
  const auto [id, offset] = rec.locate(s.chunks, size_t(s.num_chunks) * sizeof(OptimChunk), op);
  (void)id;
  (void)offset;
  r.chunks.resize(size_t(s.num_chunks));
  std::memcpy(r.chunks.data(), s.chunks, r.chunks.size() * sizeof(OptimChunk));
  r.params = rec.ref(p, F32, op);
  r.grads = rec.ref(g, F32, op);
  r.s0 = rec.ref(a, F32, op);
  r.s1 = b ? rec.ref(b, F32, op) : Ref{};
  r.sumsq = rec.ref(s.grad_sumsq, F64, op);
  r.step = s;
  return r;
}

// A vector over the whole arena [0, n) from per-span values (`of(span)`, shape [span length])
// and `gap` between spans (the registry's alignment padding, where every value stays 0). The
// update then runs over the arena at once: a few large ops instead of a chain per tensor.
template <class F>
Value per_span(Lowering& L, const std::vector<Span>& spans, int64_t n, F of, double gap) {
  std::vector<Value> parts;
  int64_t at = 0;
  for (const Span& sp : spans) {
    if (sp.begin > at) parts.push_back(L.w.constant(gap, F32, {sp.begin - at}));
    parts.push_back(of(sp));
    at = sp.end;
  }
  if (n > at) parts.push_back(L.w.constant(gap, F32, {n - at}));
  return L.w.concat(parts, 0);
}

// Every update is skipped when Σg² is not finite: new values only where `finite`.
void put(Lowering& L, Ref r, int64_t n, const Value& finite, const Value& updated, const Value& old) {
  L.write(r, {n}, L.w.select(finite, updated, old));
}

void sgd_update(void* h, const OptimStep& s, float* params, const float* grads, float* buf) {
  Recorder& rec = recorder_of(h);
  const OptimRefs r = optim_refs(rec, s, params, grads, buf, nullptr, "sgd_update");
  rec.op("sgd_update", [=](Lowering& L) {
    Ops o{L.w};
    const int64_t n = L.elems(r.params);
    const Value finite = L.w.is_finite(read_double(L, r.sumsq));
    const Value lr = o.f32(L.scalar("lr", r.step.lr));
    const Value P = L.read(r.params, {n}), G = L.read(r.grads, {n}), M = L.read(r.s0, {n});
    const float wd = float(r.step.weight_decay);
    const auto decay = [&](const Span& sp) { return L.w.constant(sp.decayed ? wd : 0.f, F32, {sp.end - sp.begin}); };
    const Value gi = wd != 0.f ? L.w.add(G, L.w.mul(per_span(L, spans(r.chunks, false), n, decay, 0), P)) : G;
    const Value m = L.w.add(L.w.mul(o.cf(float(r.step.momentum), {n}), M), gi);
    const Value p = L.w.sub(P, L.w.mul(o.all(lr, {n}), m));
    put(L, r.s0, n, finite, m, M);
    put(L, r.params, n, finite, p, P);
  }, {r.params.buffer, r.grads.buffer, r.s0.buffer, r.sumsq.buffer});
}

// 1 − β^t in double from the runtime step count.
Value one_minus_pow(Ops& o, double beta, const Value& t) {
  return o.w.sub(o.c(1, F64), o.w.binary("power", o.c(beta, F64), t));
}

void adamw_update(void* h, const OptimStep& s, float* params, const float* grads, float* m, float* v) {
  Recorder& rec = recorder_of(h);
  const OptimRefs r = optim_refs(rec, s, params, grads, m, v, "adamw_update");
  rec.op("adamw_update", [=](Lowering& L) {
    Ops o{L.w};
    const OptimStep& k = r.step;
    const int64_t n = L.elems(r.params);
    const Value finite = L.w.is_finite(read_double(L, r.sumsq));
    const Value lr = L.scalar("lr", k.lr), t = L.scalar("t", double(k.t));
    const Value decay = o.f32(L.w.sub(o.c(1, F64), L.w.mul(lr, o.c(k.weight_decay, F64))));
    const Value step_size = o.f32(L.w.div(lr, one_minus_pow(o, k.beta1, t)));
    const Value bc2_sqrt = o.f32(L.w.unary("sqrt", one_minus_pow(o, k.beta2, t)));
    const Value P = L.read(r.params, {n}), G = L.read(r.grads, {n}), M = L.read(r.s0, {n}), V = L.read(r.s1, {n});
    const auto factor = [&](const Span& sp) {
      const Dims len{sp.end - sp.begin};
      return sp.decayed ? o.all(decay, len) : L.w.constant(1, F32, len);
    };
    const Value p0 = L.w.mul(P, per_span(L, spans(r.chunks, false), n, factor, 1));
    const Value m1 = L.w.add(L.w.mul(M, o.cf(float(k.beta1), {n})), L.w.mul(o.cf(float(1 - k.beta1), {n}), G));
    const Value v1 = L.w.add(L.w.mul(V, o.cf(float(k.beta2), {n})), L.w.mul(L.w.mul(o.cf(float(1 - k.beta2), {n}), G), G));
    const Value denom = L.w.add(L.w.div(L.w.unary("sqrt", v1), o.all(bc2_sqrt, {n})), o.cf(float(k.eps), {n}));
    const Value p1 = L.w.sub(p0, L.w.mul(o.all(step_size, {n}), L.w.div(m1, denom)));
    put(L, r.s0, n, finite, m1, M);
    put(L, r.s1, n, finite, v1, V);
    put(L, r.params, n, finite, p1, P);
  }, {r.params.buffer, r.grads.buffer, r.s0.buffer, r.s1.buffer, r.sumsq.buffer});
}

// DeepMind's LAMB: Adam moments, u = m̂/(√v̂ + eps) (+ wd·p), per-tensor trust ratio ‖p‖/‖u‖
// (1 when either is 0, norms in double then float), p −= lr·ratio·u.
void lamb_update(void* h, const OptimStep& s, float* params, const float* grads, float* m, float* v) {
  Recorder& rec = recorder_of(h);
  const OptimRefs r = optim_refs(rec, s, params, grads, m, v, "lamb_update");
  rec.op("lamb_update", [=](Lowering& L) {
    Ops o{L.w};
    const OptimStep& k = r.step;
    const int64_t n = L.elems(r.params);
    const Value finite = L.w.is_finite(read_double(L, r.sumsq));
    const Value lr = o.f32(L.scalar("lr", k.lr)), t = L.scalar("t", double(k.t));
    const Value bc1 = o.f32(one_minus_pow(o, k.beta1, t)), bc2 = o.f32(one_minus_pow(o, k.beta2, t));
    const Value P = L.read(r.params, {n}), G = L.read(r.grads, {n}), M = L.read(r.s0, {n}), V = L.read(r.s1, {n});
    const Value m1 = L.w.add(L.w.mul(o.cf(float(1 - k.beta1), {n}), G), L.w.mul(o.cf(float(k.beta1), {n}), M));
    const Value v1 = L.w.add(L.w.mul(L.w.mul(o.cf(float(1 - k.beta2), {n}), G), G), L.w.mul(o.cf(float(k.beta2), {n}), V));
    Value u = L.w.div(L.w.div(m1, o.all(bc1, {n})),
                      L.w.add(L.w.unary("sqrt", L.w.div(v1, o.all(bc2, {n}))), o.cf(float(k.eps), {n})));
    const std::vector<Span> tensors = spans(r.chunks, true);
    const float wd = float(k.weight_decay);
    const auto decay = [&](const Span& sp) { return L.w.constant(sp.decayed ? wd : 0.f, F32, {sp.end - sp.begin}); };
    if (wd != 0.f) u = L.w.add(u, L.w.mul(per_span(L, tensors, n, decay, 0), P));
    const Value p64 = o.f64(P), u64 = o.f64(u);
    const auto trust = [&](const Span& sp) {
      const Value pn = o.f32(L.w.unary("sqrt", o.total(L.w.slice(L.w.mul(p64, p64), {sp.begin}, {sp.end}))));
      const Value un = o.f32(L.w.unary("sqrt", o.total(L.w.slice(L.w.mul(u64, u64), {sp.begin}, {sp.end}))));
      const Value zero = o.cf(0, {});
      const Value degenerate = L.w.binary("or", L.w.compare("EQ", pn, zero), L.w.compare("EQ", un, zero));
      return o.all(L.w.select(degenerate, o.cf(1, {}), L.w.div(pn, un)), {sp.end - sp.begin});
    };
    const Value ratio = per_span(L, tensors, n, trust, 1);
    const Value p1 = L.w.add(P, L.w.unary("negate", L.w.mul(L.w.mul(u, ratio), o.all(lr, {n}))));
    put(L, r.s0, n, finite, m1, M);
    put(L, r.s1, n, finite, v1, V);
    put(L, r.params, n, finite, p1, P);
  }, {r.params.buffer, r.grads.buffer, r.s0.buffer, r.s1.buffer, r.sumsq.buffer});
}

}  // namespace

void fill_model_ops(KernelTable<float>& t) {
  t.embed_forward = embed_forward;
  t.embed_backward_rows = embed_backward_rows;
  t.queries_forward = queries_forward;
  t.queries_backward = queries_backward;
  t.gather_targets = gather_targets;
  t.clip_by_global_norm = clip_by_global_norm;
  t.sgd_update = sgd_update;
  t.adamw_update = adamw_update;
  t.lamb_update = lamb_update;
}

}  // namespace perceiver::capture
