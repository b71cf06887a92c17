#include "backend/guarded/guarded_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "perceiver/error.h"

namespace perceiver::guarded {

struct GuardedBackend::State {
  std::recursive_mutex mutex;
  std::map<void*, size_t> mappings;  // base → mapped bytes (whole pages)
  int open_depth = 0;                // > 0 while an op or copy runs

  void protect_all(int prot) {
    for (const auto& [base, bytes] : mappings)
      PCV_CHECK(::mprotect(base, bytes, prot) == 0, "guarded: mprotect failed: ", std::strerror(errno));
  }
  // Opens every mapping for the duration of one op or copy.
  class Open {
   public:
    explicit Open(State& s) : s_(s), lock_(s.mutex) {
      if (s_.open_depth++ == 0) s_.protect_all(PROT_READ | PROT_WRITE);
    }
    ~Open() {
      if (--s_.open_depth == 0) s_.protect_all(PROT_NONE);
    }
    Open(const Open&) = delete;
    Open& operator=(const Open&) = delete;

   private:
    State& s_;
    std::lock_guard<std::recursive_mutex> lock_;
  };
};

namespace {

// One table entry: open the mappings, run the CPU kernel, close them again.
template <class Table, auto Member>
struct GuardedOp;
template <class Table, class... A, void (*Table::*Member)(void*, A...)>
struct GuardedOp<Table, Member> {
  static void call(void* h, A... a) {
    GuardedBackend::State::Open open(*static_cast<GuardedBackend::State*>(h));
    (cpu::kernel_table<typename Table::Scalar>().*Member)(nullptr, a...);
  }
};

template <class T>
const KernelTable<T>& guarded_table() {
  static const KernelTable<T> table = [] {
    KernelTable<T> t;
#define PCV_GUARDED_OP(op) t.op = GuardedOp<KernelTable<T>, &KernelTable<T>::op>::call;
    PCV_KERNEL_OPS(PCV_GUARDED_OP)
#undef PCV_GUARDED_OP
    check_complete(t, "guarded");
    return t;
  }();
  return table;
}

size_t page_size() { return size_t(::sysconf(_SC_PAGESIZE)); }

}  // namespace

GuardedBackend::GuardedBackend() : state_(std::make_unique<State>()) { cpu_backend(); }

GuardedBackend::~GuardedBackend() = default;

std::string GuardedBackend::describe() const {
  return "guarded: the cpu kernels on memory that only its own ops may touch (" + cpu_backend().describe() + ")";
}

Buffer GuardedBackend::allocate(size_t bytes) {
  if (bytes == 0) return {};
  const size_t page = page_size(), mapped = (bytes + page - 1) / page * page;
  void* p = ::mmap(nullptr, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  PCV_CHECK(p != MAP_FAILED, "guarded: out of memory mapping ", bytes, " bytes: ", std::strerror(errno));
  State* s = state_.get();
  {
    std::lock_guard<std::recursive_mutex> lock(s->mutex);
    s->mappings[p] = mapped;
    // An allocation inside an open op must be usable by the rest of it.
    if (s->open_depth > 0) ::mprotect(p, mapped, PROT_READ | PROT_WRITE);
  }
  return Buffer(p, bytes, [s, mapped](void* q) {
    std::lock_guard<std::recursive_mutex> lock(s->mutex);
    s->mappings.erase(q);
    ::munmap(q, mapped);
  });
}

void GuardedBackend::zero(void* dst, size_t bytes) {
  State::Open open(*state_);
  std::memset(dst, 0, bytes);
}

void GuardedBackend::copy_to_device(void* dst, const void* src, size_t bytes) {
  State::Open open(*state_);
  std::memcpy(dst, src, bytes);
}

void GuardedBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  State::Open open(*state_);
  std::memcpy(dst, src, bytes);
}

void* GuardedBackend::handle() const { return state_.get(); }

const KernelTable<float>& GuardedBackend::kernels_f32() const { return guarded_table<float>(); }
const KernelTable<double>* GuardedBackend::kernels_f64() const { return &guarded_table<double>(); }

}  // namespace perceiver::guarded
