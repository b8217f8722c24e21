// The memory plan's proof (src/native/format/memory.py verify_plan): storage classes and lifetimes from
// the instructions alone, each slot exactly its tensor's upper bound over the allowed input
// sizes, and no two slots live at the same time sharing bytes. Interval arithmetic saturates at
// +-2**100, treated as unbounded: an expression that large bounds nothing a slot could hold.
#include <algorithm>
#include <iterator>
#include <map>
#include <set>

#include "program.h"

namespace pt2n {

namespace {
using I = __int128;
const I kInf = I(1) << 100;

I sat(I v) { return v >= kInf ? kInf : v <= -kInf ? -kInf : v; }
I add(I a, I b) { return sat(a + b); }  // |a|, |b| <= 2**100: no int128 overflow
I mul(I a, I b) {
  if (a == 0 || b == 0) return 0;
  I r;
  if (__builtin_mul_overflow(a, b, &r)) return ((a < 0) != (b < 0)) ? -kInf : kInf;
  return sat(r);
}
I floordiv(I a, I b) { I q = a / b; if ((a % b != 0) && ((a < 0) != (b < 0))) --q; return q; }
I ceildiv(I a, I b) { return -floordiv(-a, b); }

struct Iv { I lo, hi; };

Iv interval(int64_t op, const std::vector<Iv>& a) {
  enum { PUSH, SYM, ADD, MUL, FLOORDIV, MOD, POW, MAX, MIN, EQ, NE, LT, LE, GT, GE, AND, OR, NOT, CEILDIV, WHERE };
  switch (op) {
    case ADD: { Iv r{0, 0}; for (auto& x : a) { r.lo = add(r.lo, x.lo); r.hi = add(r.hi, x.hi); } return r; }
    case MUL: {
      Iv r = a[0];
      for (size_t k = 1; k < a.size(); ++k) {
        I p[4] = {mul(r.lo, a[k].lo), mul(r.lo, a[k].hi), mul(r.hi, a[k].lo), mul(r.hi, a[k].hi)};
        r = {*std::min_element(p, p + 4), *std::max_element(p, p + 4)};
      }
      return r;
    }
    case MAX: case MIN: {
      Iv r = a[0];
      for (auto& x : a) {
        r.lo = op == MAX ? std::max(r.lo, x.lo) : std::min(r.lo, x.lo);
        r.hi = op == MAX ? std::max(r.hi, x.hi) : std::min(r.hi, x.hi);
      }
      return r;
    }
    case FLOORDIV: case CEILDIV:
      if (a[0].lo >= 0 && a[1].lo > 0)
        return {a[1].hi >= kInf ? 0 : floordiv(a[0].lo, a[1].hi), a[0].hi >= kInf ? kInf : ceildiv(a[0].hi, a[1].lo)};
      break;
    case MOD:
      if (a[1].lo > 0) return {0, a[1].hi >= kInf ? kInf : a[1].hi - 1};
      break;
    case POW:
      if (a[0].lo >= 0 && a[1].lo >= 0) {
        auto pw = [](I b, I e) { I r = 1; for (I k = 0; k < e && r < kInf && r != 0; ++k) { r = mul(r, b); if (b == 1) break; } return e == 0 ? I(1) : r; };
        I lo = a[1].lo >= kInf ? (a[0].lo > 1 ? kInf : a[0].lo) : pw(a[0].lo, a[1].lo);
        I hi = (a[0].hi >= kInf || a[1].hi >= kInf) ? kInf : pw(a[0].hi, a[1].hi);
        return {lo, hi};
      }
      break;
    case WHERE: return {std::min(a[1].lo, a[2].lo), std::max(a[1].hi, a[2].hi)};
    case EQ: case NE: case LT: case LE: case GT: case GE: case AND: case OR: case NOT: return {0, 1};
    default: break;
  }
  return {-kInf, kInf};
}

Iv code_bounds(const std::vector<int64_t>& code, const std::vector<std::optional<Iv>>& ranges) {
  static const bool imm[] = {true, true, true, true, false, false, false, true, true, false, false, false,
                             false, false, false, true, true, false, false, false};
  static const int arity[] = {0, 0, -1, -1, 2, 2, 2, -1, -1, 2, 2, 2, 2, 2, 2, -1, -1, 1, 2, 3};
  std::vector<Iv> st;
  for (size_t i = 0; i < code.size();) {
    int64_t op = code[i];
    if (op == 0) { st.push_back({sat(code[i + 1]), sat(code[i + 1])}); i += 2; continue; }
    if (op == 1) {
      const auto& r = ranges[size_t(code[i + 1])];
      st.push_back(r ? *r : Iv{-kInf, kInf});
      i += 2;
      continue;
    }
    size_t k = size_t(imm[op] ? code[i + 1] : arity[op]);
    std::vector<Iv> args(st.end() - std::ptrdiff_t(k), st.end());
    st.resize(st.size() - k);
    st.push_back(interval(op, args));
    i += imm[op] ? 2 : 1;
  }
  return st[0];
}

std::string i128_str(I v) {
  if (v == 0) return "0";
  bool neg = v < 0;
  std::string s;
  for (; v != 0; v /= 10) s.insert(s.begin(), char('0' + int(neg ? -(v % 10) : v % 10)));
  return neg ? "-" + s : s;
}

struct UF {
  std::vector<size_t> p;
  explicit UF(size_t n) : p(n) { for (size_t i = 0; i < n; ++i) p[i] = i; }
  size_t find(size_t x) { while (p[x] != x) { p[x] = p[p[x]]; x = p[x]; } return x; }
  void unite(size_t a, size_t b) { a = find(a); b = find(b); if (a != b) p[std::max(a, b)] = std::min(a, b); }
};

[[noreturn]] void plan_error(const std::string& what, const std::string& msg) {
  damaged(what, "memory_plan", msg);
}
}  // namespace

std::vector<char> out_calls(const Program& p) {
  std::set<int64_t> planned;
  for (const Allocation& a : p.memory_plan.allocations) planned.insert(a.value);
  std::vector<char> runs(p.instructions.size(), 0);
  for (size_t pos = 0; pos < p.instructions.size(); ++pos) {
    const Instruction& ins = p.instructions[pos];
    if (ins.kind != IK::Kernel || ins.k.out_op < 0 || ins.k.outs.empty()) continue;
    bool all = true;
    for (int64_t o : ins.k.outs) all = all && planned.count(o);
    runs[pos] = all;
  }
  return runs;
}

std::pair<std::vector<int64_t>, int64_t> pack(const std::vector<PackItem>& items) {
  constexpr int64_t kBucket = 64;  // instructions per time bucket, as memory.pack
  struct Blk { int64_t off, size, s, e; };
  std::vector<Blk> blocks;
  std::map<int64_t, std::vector<size_t>> buckets;
  std::vector<int64_t> offsets;
  offsets.reserve(items.size());
  int64_t arena = 0;
  std::vector<size_t> busy;
  std::vector<char> seen;
  for (const PackItem& it : items) {
    int64_t size = (it.nbytes + int64_t(kAlign) - 1) / int64_t(kAlign) * int64_t(kAlign);
    busy.clear();
    seen.assign(blocks.size(), 0);
    for (int64_t b = it.start / kBucket; b <= it.end / kBucket; ++b) {
      auto f = buckets.find(b);
      if (f == buckets.end()) continue;
      for (size_t k : f->second) {
        const Blk& x = blocks[k];
        if (x.s <= it.end && it.start <= x.e && !seen[k]) { seen[k] = 1; busy.push_back(k); }
      }
    }
    std::sort(busy.begin(), busy.end(), [&](size_t a, size_t b) {
      return std::tie(blocks[a].off, blocks[a].size) < std::tie(blocks[b].off, blocks[b].size);
    });
    int64_t off = 0;
    for (size_t k : busy) {
      if (off + size <= blocks[k].off) break;
      off = std::max(off, blocks[k].off + blocks[k].size);
    }
    blocks.push_back({off, size, it.start, it.end});
    for (int64_t b = it.start / kBucket; b <= it.end / kBucket; ++b) buckets[b].push_back(blocks.size() - 1);
    offsets.push_back(off);
    arena = std::max(arena, off + size);
  }
  return {offsets, arena};
}

std::optional<std::pair<int64_t, std::string>> code_overflow(const std::vector<int64_t>& code,
                                                             const std::vector<Symbol>& symbols) {
  static const bool imm[] = {true, true, true, true, false, false, false, true, true, false, false, false,
                             false, false, false, true, true, false, false, false};
  static const int arity[] = {0, 0, -1, -1, 2, 2, 2, -1, -1, 2, 2, 2, 2, 2, 2, -1, -1, 1, 2, 3};
  const I lo64 = -(I(1) << 63), hi64 = (I(1) << 63) - 1;
  std::vector<Iv> st;
  for (size_t i = 0; i < code.size();) {
    int64_t op = code[i];
    if (op == 0) { st.push_back({sat(code[i + 1]), sat(code[i + 1])}); i += 2; continue; }
    if (op == 1) {
      // an input's symbol is a natural number within its range; an unbacked one any int64
      const Symbol& s = symbols[size_t(code[i + 1])];
      st.push_back(s.input >= 0 ? Iv{sat(std::max<int64_t>(0, s.min.value_or(0))), s.max ? sat(*s.max) : kInf}
                                : Iv{-kInf, kInf});
      i += 2;
      continue;
    }
    size_t k = size_t(imm[op] ? code[i + 1] : arity[op]);
    std::vector<Iv> args(st.end() - std::ptrdiff_t(k), st.end());
    st.resize(st.size() - k);
    Iv r = interval(op, args);
    if (op == 2 || op == 3 || op == 6)  // add, mul, pow: the results the runtimes refuse past int64
      for (I b : {r.lo, r.hi})
        // past 2**99 decides nothing: a saturated bound plus a constant is still "unbounded"
        if (b > -(kInf >> 1) && b < (kInf >> 1) && (b < lo64 || b > hi64)) return std::pair{int64_t(i), i128_str(b)};
    st.push_back(r);
    i += imm[op] ? 2 : 1;
  }
  return std::nullopt;
}

void verify_plan(const Program& p, const std::string& what) {
  const size_t nv = p.values.size(), n = p.instructions.size();
  // A call runs out= exactly when every output has a slot; slots on a call that cannot run out=
  // (or on only some of its outputs) would never be written.
  {
    std::set<int64_t> planned;
    for (const Allocation& a : p.memory_plan.allocations) planned.insert(a.value);
    for (size_t pos = 0; pos < n; ++pos) {
      const Instruction& ins = p.instructions[pos];
      if (ins.kind != IK::Kernel) continue;
      std::string got;
      size_t count = 0;
      for (int64_t o : ins.k.outs)
        if (planned.count(o)) { got += (count++ ? ", " : "") + std::to_string(o); }
      if (count && (ins.k.out_op < 0 || count != ins.k.outs.size()))
        plan_error(what, "instructions[" + std::to_string(pos) + "]: values [" + got + "] have arena slots but the "
                         "call does not run an out= variant writing all of its outputs, so nothing would write them");
    }
  }
  // Results of calls run functionally share storage with the arguments their operator lists;
  // an out= call writes fresh memory.
  const std::vector<char> runs_out = out_calls(p);
  UF uf(nv);
  std::vector<size_t> first(nv, n);
  std::vector<int64_t> last(nv, -1);
  std::vector<char> freed(nv, 0);
  std::map<int64_t, size_t> producers;
  std::vector<std::pair<size_t, size_t>> loops;
  // Lists nest at most kMaxListDepth deep (validate_program), so these walks are bounded.
  std::vector<int64_t> work;
  auto touch = [&](int64_t v0, size_t pos) {
    work.assign(1, v0);
    while (!work.empty()) {
      int64_t v = work.back();
      work.pop_back();
      first[size_t(v)] = std::min(first[size_t(v)], pos);
      last[size_t(v)] = std::max(last[size_t(v)], int64_t(pos));
      if (p.values[size_t(v)].kind == VK::List) for (int64_t it : p.values[size_t(v)].ints) work.push_back(it);
    }
  };
  auto leaves = [&](int64_t v0) {
    std::vector<int64_t> out, w{v0};
    while (!w.empty()) {
      int64_t v = w.back();
      w.pop_back();
      if (p.values[size_t(v)].kind == VK::List) for (int64_t it : p.values[size_t(v)].ints) w.push_back(it);
      else out.push_back(v);
    }
    return out;
  };
  auto join = [&](int64_t a, int64_t b) {
    auto la = leaves(a), lb = leaves(b);
    for (int64_t s : la) for (int64_t d : lb) uf.unite(size_t(s), size_t(d));
  };
  for (size_t pos = 0; pos < n; ++pos) {
    const Instruction& ins = p.instructions[pos];
    switch (ins.kind) {
      case IK::Kernel: {
        const KernelCall& k = ins.k;
        for (int64_t a : k.args) touch(a, pos);
        const auto& aliases = p.operators[size_t(k.op)].returns_alias;
        bool all_tensors = true, any = false;
        for (size_t j = 0; j < k.outs.size(); ++j) {
          int64_t o = k.outs[j];
          if (o == -1) continue;
          any = true;
          all_tensors = all_tensors && p.values[size_t(o)].kind == VK::Tensor;
          touch(o, pos);
          if (j < aliases.size() && !runs_out[pos])
            for (int64_t a : aliases[j]) if (a < int64_t(k.args.size())) join(k.args[size_t(a)], o);
        }
        if (k.out_op >= 0 && any && all_tensors)
          for (int64_t o : k.outs) if (o != -1) producers.emplace(o, pos);
        break;
      }
      case IK::Move: touch(ins.a, pos); touch(ins.b, pos); join(ins.a, ins.b); break;
      case IK::JumpFalse:
        touch(ins.a, pos);
        if (size_t(ins.b) <= pos) loops.emplace_back(size_t(ins.b), pos);
        break;
      case IK::Free: touch(ins.a, pos); freed[size_t(ins.a)] = 1; break;
      case IK::Alloc: touch(ins.a, pos); producers.emplace(ins.a, pos); break;
    }
  }
  std::vector<size_t> root(nv);
  std::map<size_t, int64_t> end;
  for (size_t v = 0; v < nv; ++v) {
    root[v] = uf.find(v);
    if (last[v] < 0) continue;
    auto it = end.find(root[v]);
    int64_t e = freed[v] ? last[v] : int64_t(n);
    if (it == end.end()) end[root[v]] = e; else it->second = std::max(it->second, e);
  }
  std::set<size_t> pinned;
  for (const Input& in : p.inputs) pinned.insert(root[size_t(in.value)]);
  for (const State& s : p.state) pinned.insert(root[size_t(s.value)]);
  for (int64_t o : p.outputs) pinned.insert(root[size_t(o)]);

  std::vector<std::optional<Iv>> ranges(p.symbols.size());
  for (size_t k = 0; k < p.symbols.size(); ++k)
    if (p.symbols[k].input >= 0 && p.symbols[k].min && p.symbols[k].max) ranges[k] = Iv{*p.symbols[k].min, *p.symbols[k].max};

  struct Item { int64_t s, e; I lo, hi; int64_t v; };
  // The loops no other loop holds, sorted (memory.py's outermost_loops; overlapping ones merge).
  std::vector<std::pair<int64_t, int64_t>> outer;
  std::sort(loops.begin(), loops.end());
  for (auto [la, lb] : loops) {
    if (!outer.empty() && int64_t(la) <= outer.back().second) outer.back().second = std::max(outer.back().second, int64_t(lb));
    else outer.emplace_back(int64_t(la), int64_t(lb));
  }
  std::vector<Item> items;
  for (const Allocation& a : p.memory_plan.allocations) {
    std::string slot = "allocation for value " + std::to_string(a.value);
    auto pr = producers.find(a.value);
    size_t r = root[size_t(a.value)];
    bool plannable = pr != producers.end() && !pinned.count(r);
    int64_t lo = 0, hi = 0;
    if (plannable) {
      lo = int64_t(pr->second);
      hi = end.count(r) ? end[r] : -1;
      // Loops nest or are disjoint (validate_program), so only the outermost ones matter, and they
      // are sorted and disjoint: bisections instead of a walk over every loop per allocation.
      const int64_t pos = int64_t(pr->second);
      auto after = std::upper_bound(outer.begin(), outer.end(), pos, [](int64_t x, const auto& l) { return x < l.first; });
      if (after != outer.begin() && pos <= std::prev(after)->second) plannable = false;
      auto first = std::lower_bound(outer.begin(), outer.end(), lo, [](const auto& l, int64_t x) { return l.second < x; });
      auto last = std::upper_bound(outer.begin(), outer.end(), hi, [](int64_t x, const auto& l) { return x < l.first; });
      if (plannable && first < last) {  // touched inside loops: live across all of them
        lo = std::min(lo, first->first);
        hi = std::max(hi, std::prev(last)->second);
      }
    }
    if (!plannable)
      plan_error(what, slot + ": the value is not a fresh intermediate outside loops (inputs, state, outputs and loop "
                              "bodies are never planned)");
    if (a.start != lo || a.end != hi)
      plan_error(what, slot + ": lifetime " + std::to_string(a.start) + ".." + std::to_string(a.end) +
                           " differs from the derived " + std::to_string(lo) + ".." + std::to_string(hi));
    // The tensor's upper bound in bytes.
    const Value& t = p.values[size_t(a.value)];
    bool bounded = true;
    auto ub = [&](const Dim& d) -> I {
      if (!d.sym) return d.v;
      Iv b = code_bounds(p.exprs[size_t(d.v)], ranges);
      if (b.lo <= -kInf || b.hi >= kInf || b.lo < 0) bounded = false;
      return b.hi;
    };
    std::vector<I> sizes, strides;
    for (auto& d : t.sizes) sizes.push_back(ub(d));
    for (auto& d : t.strides) strides.push_back(ub(d));
    I off = ub(t.storage_offset), nb = 0;
    if (bounded) {
      bool zero = false;
      for (I s : sizes) zero = zero || s == 0;
      if (!zero) {
        I span = add(off, 1);
        for (size_t k = 0; k < sizes.size(); ++k) span = add(span, mul(sizes[k] - 1, strides[k]));
        nb = mul(span, I(itemsize(t.dtype)));
        bounded = nb < kInf;
      }
    }
    if (!bounded || nb > a.nbytes)
      plan_error(what, slot + ": " + std::to_string(a.nbytes) + " bytes cannot hold the tensor's upper bound" +
                           (bounded ? " of " + std::to_string(int64_t(nb)) + " bytes" : " (unbounded)"));
    if (nb < a.nbytes)
      plan_error(what, slot + ": " + std::to_string(a.nbytes) + " bytes is more than the tensor's upper bound of " +
                           std::to_string(int64_t(nb)) + " bytes");
    items.push_back({lo, hi, a.offset, I(a.offset) + a.nbytes, a.value});
  }
  std::sort(items.begin(), items.end(), [](const Item& x, const Item& y) {
    return std::tie(x.s, x.e, x.lo, x.hi, x.v) < std::tie(y.s, y.e, y.lo, y.hi, y.v);
  });
  std::vector<Item> active;
  for (const Item& it : items) {
    active.erase(std::remove_if(active.begin(), active.end(), [&](const Item& a) { return a.e < it.s; }), active.end());
    for (const Item& a : active)
      if (it.lo < a.hi && a.lo < it.hi && it.hi > it.lo && a.hi > a.lo)
        plan_error(what, "values " + std::to_string(a.v) + " and " + std::to_string(it.v) +
                             " are live together but their arena bytes overlap");
    active.push_back(it);
  }
}

}  // namespace pt2n
