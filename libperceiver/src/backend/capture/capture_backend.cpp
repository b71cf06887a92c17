#include "backend/capture/capture_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "backend/capture/capture_ops.h"
#include "perceiver/error.h"

namespace perceiver::capture {

// ---- Recorder --------------------------------------------------------------------------------

Recorder::Recorder() = default;
Recorder::~Recorder() = default;

int32_t Recorder::add_buffer(void* base, size_t bytes) {
  const int32_t id = next_id_++;
  allocs_[uintptr_t(base)] = {id, bytes};
  bases_[id] = uintptr_t(base);
  BufferInfo info;
  info.id = id;
  info.bytes = bytes;
  infos_[id] = info;
  return id;
}

void Recorder::remove_buffer(void* base) {
  auto it = allocs_.find(uintptr_t(base));
  PCV_ASSERT(it != allocs_.end(), "capture: free of unknown memory");
  const int32_t id = it->second.id;
  if (recording_) graph_.buffers[id] = infos_.at(id);  // the region may still name it
  if (on_free) on_free(id);
  host_dirty_.erase(std::remove(host_dirty_.begin(), host_dirty_.end(), id), host_dirty_.end());
  allocs_.erase(it);
  bases_.erase(id);
  infos_.erase(id);
  op_written_.erase(id);
}

std::pair<int32_t, size_t> Recorder::locate(const void* p, size_t bytes, const char* what) const {
  const uintptr_t a = uintptr_t(p);
  auto it = allocs_.upper_bound(a);
  PCV_CHECK(it != allocs_.begin(), "capture: ", what, " got a pointer that is not capture-backend memory");
  --it;
  PCV_CHECK(a + bytes <= it->first + it->second.bytes, "capture: ", what, " reaches past the end of buffer ",
            it->second.id, " (", bytes, " bytes at offset ", a - it->first, " of ", it->second.bytes, ")");
  return {it->second.id, size_t(a - it->first)};
}

void Recorder::set_name(const void* p, std::string_view name) {
  const auto [id, offset] = locate(p, 0, "name_buffer");
  PCV_CHECK(offset == 0, "capture: name_buffer('", name, "') does not point at the start of an allocation");
  infos_[id].name = std::string(name);
}

// Ops take their references before they are recorded: the first reference of an op outside a
// region opens one (auto regions), so that the buffers it names are the region's.
void Recorder::open_region_for(const char* op) {
  if (recording_) return;
  PCV_CHECK(auto_regions_, "capture: op ", op, " outside a capture region; HINT: CaptureBackend::begin()");
  begin("step");
}

Ref Recorder::ref(const void* p, Elem e, const char* op) {
  open_region_for(op);
  const auto [id, offset] = locate(p, 0, op);
  BufferInfo& info = infos_.at(id);
  if (!info.typed) {
    PCV_CHECK(info.bytes % elem_bytes(e) == 0, "capture: op ", op, " reads buffer ", id, " of ", info.bytes,
              " bytes as ", elem_name(e));
    info.typed = true;
    info.elem = e;
  }
  PCV_CHECK(info.elem == e, "capture: op ", op, " uses buffer ", id, " as ", elem_name(e), " but it holds ",
            elem_name(info.elem));
  PCV_CHECK(offset % elem_bytes(e) == 0, "capture: op ", op, " got a misaligned ", elem_name(e), " pointer");
  graph_.buffers[id] = info;
  return Ref{id, int64_t(offset / elem_bytes(e))};
}

const BufferInfo& Recorder::info(int32_t id) const { return infos_.at(id); }

void Recorder::begin(const std::string& name) {
  PCV_CHECK(!recording_, "capture: begin('", name, "') while region '", graph_.name, "' is open");
  graph_ = Graph{};
  graph_.name = name;
  graph_.host_written = std::move(host_dirty_);
  host_dirty_.clear();
  for (int32_t id : graph_.host_written) graph_.buffers[id] = infos_.at(id);
  recording_ = true;
}

Graph Recorder::end() {
  PCV_CHECK(recording_, "capture: end() without begin()");
  for (auto& [id, info] : graph_.buffers)
    if (infos_.count(id)) info = infos_.at(id);  // names and types given since
  recording_ = false;
  return std::move(graph_);
}

void Recorder::op(const char* name, std::function<void(Lowering&)> lower, std::vector<int32_t> touches) {
  open_region_for(name);
  for (int32_t id : touches) op_written_[id] = true;
  Node n;
  n.kind = Node::Kind::kOp;
  n.op = name;
  n.lower = std::move(lower);
  n.touches = std::move(touches);
  graph_.nodes.push_back(std::move(n));
}

// Buffers whose bytes here are still their true value (never touched by an op), or named state,
// keep their region-entry bytes before the host overwrites them inside the region.
void Recorder::copy_on_write(int32_t id) {
  if (graph_.entry_copies.count(id)) return;
  const BufferInfo& info = infos_.at(id);
  if (info.name.empty() && op_written_.count(id)) return;
  const auto* p = reinterpret_cast<const uint8_t*>(bases_.at(id));
  graph_.entry_copies[id] = std::vector<uint8_t>(p, p + info.bytes);
}

void Recorder::mark_dirty(int32_t id) {
  for (int32_t d : host_dirty_)
    if (d == id) return;
  host_dirty_.push_back(id);
}

void Recorder::host_write(void* dst, const void* src, size_t bytes) {
  const auto [id, offset] = locate(dst, bytes, "copy_to_device");
  if (recording_) {
    copy_on_write(id);
    Node n;
    n.kind = Node::Kind::kHostWrite;
    n.buffer = id;
    n.byte_offset = offset;
    n.bytes = bytes;
    n.data.assign(static_cast<const uint8_t*>(src), static_cast<const uint8_t*>(src) + bytes);
    graph_.buffers[id] = infos_.at(id);
    graph_.nodes.push_back(std::move(n));
  } else {
    mark_dirty(id);
  }
  std::memcpy(dst, src, bytes);
}

void Recorder::host_zero(void* dst, size_t bytes) {
  const auto [id, offset] = locate(dst, bytes, "zero");
  if (recording_) {
    copy_on_write(id);
    Node n;
    n.kind = Node::Kind::kZero;
    n.buffer = id;
    n.byte_offset = offset;
    n.bytes = bytes;
    graph_.buffers[id] = infos_.at(id);
    graph_.nodes.push_back(std::move(n));
  } else {
    mark_dirty(id);
  }
  std::memset(dst, 0, bytes);
}

void Recorder::host_read(const void* src, size_t bytes) {
  const auto [id, offset] = locate(src, bytes, "copy_to_host");
  if (!recording_) return;
  Node n;
  n.kind = Node::Kind::kHostRead;
  n.buffer = id;
  n.byte_offset = offset;
  n.bytes = bytes;
  graph_.buffers[id] = infos_.at(id);
  graph_.nodes.push_back(std::move(n));
}

std::vector<uint8_t> Recorder::entry_bytes(const Graph& g, int32_t id) const {
  auto c = g.entry_copies.find(id);
  if (c != g.entry_copies.end()) return c->second;
  auto b = bases_.find(id);
  PCV_CHECK(b != bases_.end(), "capture: buffer ", id, " of region '", g.name, "' was freed; its entry bytes are gone");
  const auto* p = reinterpret_cast<const uint8_t*>(b->second);
  return std::vector<uint8_t>(p, p + infos_.at(id).bytes);
}

// ---- CaptureBackend --------------------------------------------------------------------------

CaptureBackend::CaptureBackend() : rec_(std::make_unique<Recorder>()) {}
CaptureBackend::~CaptureBackend() = default;

std::string CaptureBackend::describe() const {
  return "capture: records the op stream as a graph (nothing is computed)";
}

Buffer CaptureBackend::allocate(size_t bytes) {
  if (bytes == 0) return {};
  // Untouched pages cost nothing: a kinetics700-sized step can be captured on a laptop.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  PCV_CHECK(p != MAP_FAILED, "capture: cannot map ", bytes, " bytes: ", std::strerror(errno));
  rec_->add_buffer(p, bytes);
  Recorder* r = rec_.get();
  return Buffer(p, bytes, [r, bytes](void* q) {
    r->remove_buffer(q);
    ::munmap(q, bytes);
  });
}

void CaptureBackend::zero(void* dst, size_t bytes) {
  if (bytes) rec_->host_zero(dst, bytes);
}
void CaptureBackend::copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes) rec_->host_write(dst, src, bytes);
}
void CaptureBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  rec_->host_read(src, bytes);
  std::memcpy(dst, src, bytes);
}
void* CaptureBackend::handle() const { return rec_.get(); }
void CaptureBackend::name_buffer(const void* data, std::string_view name) { rec_->set_name(data, name); }
const KernelTable<float>& CaptureBackend::kernels_f32() const { return capture_table(); }

void CaptureBackend::begin(const std::string& name) { rec_->begin(name); }
bool CaptureBackend::recording() const { return rec_->recording(); }
Graph CaptureBackend::end() { return rec_->end(); }
std::vector<uint8_t> CaptureBackend::entry_bytes(const Graph& g, int32_t buffer) const {
  return rec_->entry_bytes(g, buffer);
}
int32_t CaptureBackend::buffer_of(const void* p) const { return rec_->locate(p, 0, "buffer_of").first; }
void CaptureBackend::set_auto_regions(bool on) { rec_->set_auto_regions(on); }

}  // namespace perceiver::capture
