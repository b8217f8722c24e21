// Structural validation (src/native/format/verify.py): after this every index the runtime follows is
// in range, every weight view lies inside its blob and every expression is well formed.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "program.h"

namespace pt2n {

namespace {
struct V {
  const Program& p;
  const std::string& what;
  size_t nv;

  [[noreturn]] void bad(const std::string& where, const std::string& msg) const {
    damaged(what, where, msg);
  }
  void value(int64_t i, const std::string& where, bool allow_discard = false) const {
    if (!((i >= 0 && uint64_t(i) < nv) || (allow_discard && i == -1)))
      bad(where, "value " + std::to_string(i) + " is out of range (there are " + std::to_string(nv) + " values)");
  }
  void dim(const Dim& d, const std::string& where) const {
    if (d.sym) {
      if (d.v < 0 || uint64_t(d.v) >= p.exprs.size())
        bad(where, "expression " + std::to_string(d.v) + " is out of range (there are " + std::to_string(p.exprs.size()) + ")");
    } else if (d.v < 0) {
      bad(where, std::to_string(d.v) + " is not a valid size");
    }
  }
};

bool hex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char ch : s) if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
  return true;
}
bool ident(const std::string& s, size_t b, size_t e, bool allow_empty, bool digit_first) {
  if (b == e) return allow_empty;
  for (size_t i = b; i < e; ++i) {
    char ch = s[i];
    bool ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || ch == '_' || (ch >= '0' && ch <= '9');
    if (!ok || (i == b && !digit_first && ch >= '0' && ch <= '9')) return false;
  }
  return true;
}
bool op_name(const std::string& s) {
  size_t k = s.find("::");
  return k != std::string::npos && ident(s, 0, k, false, false) && ident(s, k + 2, s.size(), false, false);
}
// Jumps must form the structured loops and branches the emitter writes (verify.py's
// control_flow, same rules and order): a loop is an unconditional backward jump to a head no other
// loop uses; loops nest or are disjoint; a forward jump never enters a loop's body from outside nor
// leaves its innermost loop past the loop's end; every loop has a conditional jump to its end.
size_t control_flow(const V& v) {
  const Program& p = v.p;
  const size_t n = p.instructions.size();
  auto at = [](size_t pc) { return "instructions[" + std::to_string(pc) + "]"; };
  auto span = [](int64_t h, int64_t e) {
    std::string s = "[";  // built by appends: GCC 12 misreads `"[" + std::to_string(h)` (-Wrestrict)
    s += std::to_string(h);
    s += ", ";
    s += std::to_string(e);
    s += "]";
    return s;
  };
  std::map<int64_t, int64_t> heads;  // head -> the backward jump closing that loop
  for (size_t pc = 0; pc < n; ++pc) {
    const Instruction& ins = p.instructions[pc];
    if (ins.kind != IK::JumpFalse || size_t(ins.b) > pc) continue;
    if (!is_unconditional(p, ins))
      v.bad(at(pc), "a backward jump (to instruction " + std::to_string(ins.b) +
                        ") must be unconditional: a loop is left through a forward jump");
    auto [it, fresh] = heads.emplace(ins.b, int64_t(pc));
    if (!fresh)
      v.bad(at(pc), "a second loop jumps back to instruction " + std::to_string(ins.b) + " (" + at(size_t(it->second)) +
                        " closes one there)");
  }
  if (heads.empty()) return 0;
  size_t depth = 0;
  std::map<int64_t, int64_t> parent;
  std::vector<int64_t> stack;
  for (auto [h, end] : heads) {
    while (!stack.empty() && heads[stack.back()] < h) stack.pop_back();
    if (!stack.empty() && heads[stack.back()] < end)
      v.bad(at(size_t(end)), "the loop " + span(h, end) + " overlaps the loop " + span(stack.back(), heads[stack.back()]) +
                                 " without nesting in it");
    if (!stack.empty()) parent[h] = stack.back();
    stack.push_back(h);
    if (stack.size() > kMaxLoopDepth) v.bad(at(size_t(end)), "loops are nested more than " + std::to_string(kMaxLoopDepth) + " deep");
    depth = std::max(depth, stack.size());
  }
  std::vector<int64_t> inner(n, -1);  // the head of the innermost loop holding each instruction
  stack.clear();
  auto next = heads.begin();
  for (size_t pc = 0; pc < n; ++pc) {
    while (!stack.empty() && heads[stack.back()] < int64_t(pc)) stack.pop_back();
    if (next != heads.end() && next->first == int64_t(pc)) stack.push_back((next++)->first);
    if (!stack.empty()) inner[pc] = stack.back();
  }
  std::set<int64_t> exits;
  for (size_t pc = 0; pc < n; ++pc) {
    const Instruction& ins = p.instructions[pc];
    if (ins.kind != IK::JumpFalse || size_t(ins.b) <= pc) continue;
    const int64_t x = ins.b, h = inner[pc];
    if (h != -1 && x > heads[h] + 1)
      v.bad(at(pc), "the jump to instruction " + std::to_string(x) + " leaves the loop " + span(h, heads[h]) + " past its end");
    int64_t g = size_t(x) < n ? inner[size_t(x)] : -1;
    if (g == x) {  // landing on a loop's head enters it from its start
      auto pa = parent.find(g);
      g = pa == parent.end() ? -1 : pa->second;
    }
    if (g != -1 && !(g <= int64_t(pc) && int64_t(pc) <= heads[g]))
      v.bad(at(pc), "the jump to instruction " + std::to_string(x) + " enters the body of the loop " + span(g, heads[g]) +
                        " from outside it");
    if (h != -1 && x == heads[h] + 1 && !is_unconditional(p, ins)) exits.insert(h);
  }
  for (auto [h, end] : heads)
    if (!exits.count(h))
      v.bad(at(size_t(end)), "the loop " + span(h, end) + " has no conditional jump to its end (instruction " +
                                 std::to_string(end + 1) + "): it could never stop");
  return depth;
}

// Every read is of a value written on every path to it and not freed since (verify.py's
// definite_assignment, same rules and order): the runtime would otherwise hand an empty IValue to a
// kernel. Constants, weights and inputs are written before the first instruction; a kernel's list
// result writes its items, and reading a list reads its items. Jump targets meet the states of
// every edge into them; loops take as many passes as they are deep.
struct Assignment {
  const V& v;
  std::vector<uint8_t> defined;
  std::string error_where, error_msg;

  // `where` is built only for the error: reads are checked once per argument of every instruction.
  template <class Where>
  void read(int64_t x, const Where& where, int64_t top) {
    if (!error_where.empty()) return;
    const Value& val = v.p.values[size_t(x)];
    if (val.kind == VK::List) {
      for (int64_t item : val.ints) {
        read(item, where, top);
        if (!error_where.empty()) return;
      }
      return;
    }
    if (!defined[size_t(x)]) {
      error_where = where();
      error_msg = "value " + std::to_string(x) + (x != top ? " (an item of value " + std::to_string(top) + ")" : "") +
                  " may be read before it is written or after it is freed";
    }
  }
  void write(int64_t x) {
    const Value& val = v.p.values[size_t(x)];
    if (val.kind == VK::List) {
      for (int64_t item : val.ints) write(item);
    } else {
      defined[size_t(x)] = 1;
    }
  }
};

void meet(std::vector<uint8_t>& into, const std::vector<uint8_t>& other) {
  for (size_t i = 0; i < into.size(); ++i) into[i] &= other[i];
}

void definite_assignment(const V& v, size_t loop_depth, uint64_t max_flow_cells) {
  const Program& p = v.p;
  const size_t n = p.instructions.size();
  std::vector<uint8_t> entry(v.nv, 0);
  for (size_t i = 0; i < v.nv; ++i) {
    const Value& val = p.values[i];
    bool unset = val.kind == VK::List || val.kind == VK::SymInt || val.kind == VK::SymFloat || val.kind == VK::SymBool ||
                 (val.kind == VK::Tensor && val.data < 0);
    entry[i] = !unset;
  }
  for (const Input& inp : p.inputs) entry[size_t(inp.value)] = 1;
  const std::vector<uint8_t> everything(v.nv, 1);
  std::map<int64_t, std::vector<uint8_t>> back_in;
  for (size_t pc = 0; pc < n; ++pc) {
    const Instruction& ins = p.instructions[pc];
    if (ins.kind == IK::JumpFalse && size_t(ins.b) <= pc) back_in[ins.b] = everything;
  }
  std::set<int64_t> targets;
  uint64_t jumps = 0;
  for (const Instruction& ins : p.instructions)
    if (ins.kind == IK::JumpFalse) {
      ++jumps;
      targets.insert(ins.b);
    }
  const uint64_t merges = jumps + targets.size();
  uint64_t cells = 0;
  for (size_t pass = 0; pass < loop_depth + 2; ++pass) {
    // A pass copies or meets the whole state at every jump and target: bound that before a file
    // with many jumps over many values makes it quadratic in the file's size.
    const uint64_t step = merges * uint64_t(v.nv);  // both below 2^32: the file holds each as a list item
    cells = cells > UINT64_MAX - step ? UINT64_MAX : cells + step;
    if (cells > max_flow_cells)
      fail(ErrorKind::FlowTooLarge,
           v.what + ": instructions: the data-flow check's work (" + std::to_string(merges) + " jumps and jump targets x " +
               std::to_string(v.nv) + " values x " + std::to_string(pass + 1) + " passes) is " + std::to_string(cells) +
               ", more than Limits.max_flow_cells=" + std::to_string(max_flow_cells) +
               "; the artifact is damaged or hostile. If it is trusted, load it with limits=serde.Limits(max_flow_cells=...)");
    Assignment a{v, entry, "", ""};
    std::map<int64_t, std::vector<uint8_t>> forward, back_out;
    for (size_t pc = 0; pc < n; ++pc) {
      auto f = forward.find(int64_t(pc));
      if (f != forward.end()) {
        meet(a.defined, f->second);
        forward.erase(f);
      }
      auto b = back_in.find(int64_t(pc));
      if (b != back_in.end()) meet(a.defined, b->second);
      const Instruction& ins = p.instructions[pc];
      auto at = [pc](const std::string& field) { return "instructions[" + std::to_string(pc) + "]" + field; };
      switch (ins.kind) {
        case IK::Kernel:
          for (size_t j = 0; j < ins.k.args.size(); ++j)
            a.read(ins.k.args[j], [&] { return at(".args[" + std::to_string(j) + "]"); }, ins.k.args[j]);
          for (int64_t o : ins.k.outs)
            if (o != -1) a.write(o);
          break;
        case IK::Move:
          a.read(ins.a, [&] { return at(".src"); }, ins.a);
          a.defined[size_t(ins.b)] = 1;
          break;
        case IK::Free: a.defined[size_t(ins.a)] = 0; break;
        case IK::Alloc: a.defined[size_t(ins.a)] = 1; break;
        case IK::JumpFalse: {
          const bool always = is_unconditional(p, ins);
          if (!always) a.read(ins.a, [&] { return at(".cond"); }, ins.a);
          auto& edges = size_t(ins.b) > pc ? forward : back_out;
          auto [it, fresh] = edges.emplace(ins.b, a.defined);
          if (!fresh) meet(it->second, a.defined);
          if (always) a.defined = everything;  // nothing falls through: what follows is reached by jumps only
          break;
        }
      }
    }
    auto f = forward.find(int64_t(n));
    if (f != forward.end()) meet(a.defined, f->second);
    for (size_t i = 0; i < p.outputs.size(); ++i)
      a.read(p.outputs[i], [&] { return "outputs[" + std::to_string(i) + "]"; }, p.outputs[i]);
    if (back_out == back_in) {
      if (!a.error_where.empty()) v.bad(a.error_where, a.error_msg);
      return;
    }
    back_in = std::move(back_out);
  }
  v.bad("instructions", "the loops' definite assignment did not settle");
}
}  // namespace

void validate_program(const Program& p, const uint8_t* segment, uint64_t seg_len, const std::string& what,
                      bool verify_hashes, Limits limits) {
  V v{p, what, p.values.size()};
  // constants
  for (size_t i = 0; i < p.constants.size(); ++i) {
    const Constant& c = p.constants[i];
    std::string where = "constants[" + std::to_string(i) + "]";
    if (!hex64(c.sha256)) v.bad(where, "sha256 '" + c.sha256 + "' is not 64 lowercase hex digits");
    if (c.offset < 0 || c.nbytes < 0 || c.offset % int64_t(kAlign) || uint64_t(c.offset) > seg_len ||
        uint64_t(c.nbytes) > seg_len - uint64_t(c.offset))
      fail(ErrorKind::Format, what + ": " + where + ": blob at offset " + std::to_string(c.offset) + " with " +
                                  std::to_string(c.nbytes) + " bytes must start at a multiple of 64 and fit in the " +
                                  std::to_string(seg_len) + "-byte segment; the file is damaged");
    if (verify_hashes && sha256_hex(segment + c.offset, size_t(c.nbytes)) != c.sha256)
      v.bad(where, "the blob's bytes do not hash to its sha256");
  }
  // Every segment byte outside the blobs (the alignment padding between them) is zero, so that every
  // byte of the file is either covered by a checksum or required to be zero (as src/native/format/verify.py).
  {
    std::vector<std::pair<uint64_t, uint64_t>> blobs;
    blobs.reserve(p.constants.size());
    for (const Constant& c : p.constants) blobs.emplace_back(uint64_t(c.offset), uint64_t(c.offset) + uint64_t(c.nbytes));
    std::sort(blobs.begin(), blobs.end());
    uint64_t end = 0;
    auto zeros = [&](uint64_t start, uint64_t stop) {
      for (uint64_t i = start; i < stop; ++i)
        if (segment[i])
          v.bad("segment", "byte " + std::to_string(i) + " lies between blobs (padding " + std::to_string(start) +
                               ".." + std::to_string(stop) + ") and is not zero");
    };
    for (const auto& b : blobs) {
      if (b.first > end) zeros(end, b.first);
      end = std::max(end, b.second);
    }
    if (end < seg_len) zeros(end, seg_len);
  }
  // exprs, symbols
  for (size_t i = 0; i < p.exprs.size(); ++i) check_code(p.exprs[i], p.symbols.size(), what + ": exprs[" + std::to_string(i) + "]");
  for (size_t i = 0; i < p.symbols.size(); ++i) {
    const Symbol& s = p.symbols[i];
    std::string where = "symbols[" + std::to_string(i) + "]";
    if (s.input != -1 && (s.input < 0 || uint64_t(s.input) >= p.inputs.size()))
      v.bad(where, "input " + std::to_string(s.input) + " is out of range");
    if (s.dim < -1 || s.scale < 1)
      v.bad(where, "dim " + std::to_string(s.dim) + " / scale " + std::to_string(s.scale) + " is invalid");
  }
  // values
  std::vector<size_t> depth(p.values.size(), 0);
  for (size_t i = 0; i < p.values.size(); ++i) {
    const Value& val = p.values[i];
    std::string where = "values[" + std::to_string(i) + "]";
    switch (val.kind) {
      case VK::ScalarType: if (!itemsize(val.i)) v.bad(where, "unknown scalar type " + std::to_string(val.i)); break;
      case VK::Layout: if (val.i < 0 || val.i > 7) v.bad(where, "unknown layout " + std::to_string(val.i)); break;
      case VK::MemoryFormat: if (val.i < 0 || val.i > 4) v.bad(where, "unknown memory format " + std::to_string(val.i)); break;
      case VK::List:
        for (size_t j = 0; j < val.ints.size(); ++j)  // items come first, so boxed lists cannot form cycles
          if (val.ints[j] < 0 || uint64_t(val.ints[j]) >= i)
            v.bad(where + ".items[" + std::to_string(j) + "]", "value " + std::to_string(val.ints[j]) + " must precede the list itself");
        for (int64_t it : val.ints) depth[i] = std::max(depth[i], depth[size_t(it)] + 1);
        if (depth[i] > kMaxListDepth) v.bad(where, "lists nest more than " + std::to_string(kMaxListDepth) + " deep");
        break;
      case VK::SymInt: case VK::SymBool:
        if (val.i < -1 || val.i >= int64_t(p.exprs.size())) v.bad(where, "expression " + std::to_string(val.i) + " is out of range");
        break;
      case VK::Tensor: {
        size_t isz = itemsize(val.dtype);
        if (!isz) v.bad(where, "unknown scalar type " + std::to_string(val.dtype));
        if (val.sizes.size() != val.strides.size())
          v.bad(where, std::to_string(val.sizes.size()) + " sizes but " + std::to_string(val.strides.size()) + " strides");
        for (size_t k = 0; k < val.sizes.size(); ++k) v.dim(val.sizes[k], where + ".sizes[" + std::to_string(k) + "]");
        for (size_t k = 0; k < val.strides.size(); ++k) v.dim(val.strides[k], where + ".strides[" + std::to_string(k) + "]");
        v.dim(val.storage_offset, where + ".storage_offset");
        if (val.data == -1) break;
        if (val.data < 0 || uint64_t(val.data) >= p.constants.size())
          v.bad(where, "constant " + std::to_string(val.data) + " is out of range");
        bool any_sym = val.storage_offset.sym;
        bool any_zero = false;
        for (auto& d : val.sizes) { any_sym |= d.sym; any_zero |= (!d.sym && d.v == 0); }
        for (auto& d : val.strides) any_sym |= d.sym;
        if (any_sym) v.bad(where, "a weight must have concrete sizes, strides and offset");
        // The end of the view in bytes, in 128-bit arithmetic so a hostile size cannot wrap.
        __int128 end = val.storage_offset.v;
        if (!any_zero) {
          end += 1;
          for (size_t k = 0; k < val.sizes.size(); ++k) {
            end += __int128(val.sizes[k].v - 1) * val.strides[k].v;
            if (end > (__int128(1) << 80)) break;
          }
        } 
        end *= isz;
        if (end > p.constants[size_t(val.data)].nbytes)
          v.bad(where, "the view reaches beyond the end of its " + std::to_string(p.constants[size_t(val.data)].nbytes) + "-byte constant");
        break;
      }
      default: break;
    }
  }
  // operators
  for (size_t i = 0; i < p.operators.size(); ++i) {
    const Operator& op = p.operators[i];
    std::string where = "operators[" + std::to_string(i) + "]";
    if (!op_name(op.name) || !ident(op.overload, 0, op.overload.size(), true, true))
      v.bad(where, "'" + op.name + "'.'" + op.overload + "' is not an operator name");
    for (size_t j = 0; j < op.returns_alias.size(); ++j)
      for (int64_t k : op.returns_alias[j])
        if (k < 0) v.bad(where + ".returns_alias[" + std::to_string(j) + "]", "argument positions must be >= 0");
  }
  // instructions
  const int64_t n_ops = int64_t(p.operators.size()), n_ins = int64_t(p.instructions.size());
  for (size_t i = 0; i < p.instructions.size(); ++i) {
    const Instruction& ins = p.instructions[i];
    std::string where = "instructions[" + std::to_string(i) + "]";
    switch (ins.kind) {
      case IK::Kernel:
        if (ins.k.op < 0 || ins.k.op >= n_ops || ins.k.out_op < -1 || ins.k.out_op >= n_ops)
          v.bad(where, "operator " + std::to_string(ins.k.op) + "/" + std::to_string(ins.k.out_op) + " is out of range (" +
                           std::to_string(n_ops) + " operators)");
        for (size_t j = 0; j < ins.k.args.size(); ++j) v.value(ins.k.args[j], where + ".args[" + std::to_string(j) + "]");
        for (size_t j = 0; j < ins.k.outs.size(); ++j) v.value(ins.k.outs[j], where + ".outs[" + std::to_string(j) + "]", true);
        break;
      case IK::Move: v.value(ins.a, where + ".src"); v.value(ins.b, where + ".dst"); break;
      case IK::JumpFalse:
        v.value(ins.a, where + ".cond");
        if (ins.b < 0 || ins.b > n_ins)
          v.bad(where, "jump target " + std::to_string(ins.b) + " is outside the " + std::to_string(n_ins) + " instructions");
        break;
      case IK::Free: v.value(ins.a, where + ".value"); break;
      case IK::Alloc:
        v.value(ins.a, where + ".value");
        if (p.values[size_t(ins.a)].kind != VK::Tensor) v.bad(where, "only tensors can be allocated");
        break;
    }
  }
  const size_t loop_depth = control_flow(v);
  // signature
  if (p.guards.size() != p.guard_texts.size())
    v.bad("guards", std::to_string(p.guards.size()) + " guards but " + std::to_string(p.guard_texts.size()) + " guard texts");
  for (size_t i = 0; i < p.guards.size(); ++i)
    if (p.guards[i] < 0 || uint64_t(p.guards[i]) >= p.exprs.size())
      v.bad("guards[" + std::to_string(i) + "]", "expression " + std::to_string(p.guards[i]) + " is out of range");
  for (size_t i = 0; i < p.inputs.size(); ++i) v.value(p.inputs[i].value, "inputs[" + std::to_string(i) + "].value");
  for (size_t i = 0; i < p.outputs.size(); ++i) v.value(p.outputs[i], "outputs[" + std::to_string(i) + "]");
  for (size_t i = 0; i < p.state.size(); ++i) {
    const State& s = p.state[i];
    std::string where = "state[" + std::to_string(i) + "]";
    v.value(s.value, where + ".value");
    const Value& t = p.values[size_t(s.value)];
    if (t.kind != VK::Tensor || t.data < 0) v.bad(where, "state must be a tensor backed by a constant");
    if (s.kind != "parameter" && s.kind != "buffer" && s.kind != "constant") v.bad(where, "unknown kind '" + s.kind + "'");
  }
  for (auto [field, keys, n, noun] : {std::tuple{"input_keys", &p.input_keys, p.inputs.size(), "inputs"},
                                      std::tuple{"output_keys", &p.output_keys, p.outputs.size(), "outputs"}}) {
    if (!keys->empty() && keys->size() != n)
      v.bad(field, std::to_string(keys->size()) + " keys for " + std::to_string(n) + " " + noun);
    if (std::set<std::string>(keys->begin(), keys->end()).size() != keys->size()) v.bad(field, "the keys are not distinct");
  }
  // Symbols read while the inputs are bound (src/native/format/verify.py bound_symbols, overflow).
  auto symbols_in = [](const std::vector<int64_t>& code) {
    static const bool imm[] = {true, true, true, true, false, false, false, true, true, false, false, false,
                               false, false, false, true, true, false, false, false};
    std::vector<std::pair<int64_t, int64_t>> found;  // (position, symbol)
    for (size_t i = 0; i < code.size(); i += imm[code[i]] ? 2 : 1)
      if (code[i] == 1) found.emplace_back(int64_t(i), code[i + 1]);
    return found;
  };
  auto unbound = [&](int64_t e, const std::string& where, const std::string& what_) {
    for (auto [pos, s] : symbols_in(p.exprs[size_t(e)])) {
      const Symbol& sym = p.symbols[size_t(s)];
      if (sym.input < 0)
        v.bad(where, what_ + " is expression " + std::to_string(e) + ", which reads symbol " + std::to_string(s) +
                         " ('" + sym.name + "') at position " + std::to_string(pos) +
                         "; no input binds that symbol (its input is -1, a data-dependent size), so it has no value "
                         "when the inputs are checked. Bind it to an input dimension or re-emit the program");
    }
  };
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const Input& in = p.inputs[i];
    const Value& t = p.values[size_t(in.value)];
    if (in.constant || t.kind != VK::Tensor) continue;
    for (size_t d = 0; d < t.sizes.size(); ++d)
      if (t.sizes[d].sym)
        unbound(t.sizes[d].v, "inputs[" + std::to_string(i) + "]",
                "dimension " + std::to_string(d) + " of input '" + in.name + "'");
  }
  for (size_t k = 0; k < p.guards.size(); ++k) unbound(p.guards[k], "guards[" + std::to_string(k) + "]", "the guard");
  for (size_t k = 0; k < p.exprs.size(); ++k) {
    auto found = code_overflow(p.exprs[k], p.symbols);
    if (!found) continue;
    std::set<std::string> names;
    for (auto [pos, s] : symbols_in(p.exprs[k])) names.insert(p.symbols[size_t(s)].name);
    std::string joined;
    for (const auto& n : names) joined += (joined.empty() ? "" : ", ") + n;
    const int64_t op = p.exprs[k][size_t(found->first)];
    v.bad("exprs[" + std::to_string(k) + "]", std::string("the ") + (op == 2 ? "add" : op == 3 ? "mul" : "pow") +
                                                  " at position " + std::to_string(found->first) + " reaches " +
                                                  found->second + " for some values of " +
                                                  (joined.empty() ? std::string("its constants") : joined) +
                                                  " within their ranges, past int64; narrow the symbols' ranges or "
                                                  "re-emit the program");
  }
  definite_assignment(v, loop_depth, limits.max_flow_cells);
  // debug handles: one per instruction, each -1 or an index into debug_handles
  if (p.instruction_handles.size() != p.instructions.size())
    v.bad("instruction_handles", std::to_string(p.instruction_handles.size()) + " handles for " +
                                     std::to_string(p.instructions.size()) + " instructions");
  for (size_t i = 0; i < p.instruction_handles.size(); ++i) {
    int64_t h = p.instruction_handles[i];
    if (h < -1 || h >= int64_t(p.debug_handles.size()))
      v.bad("instruction_handles[" + std::to_string(i) + "]", "handle " + std::to_string(h) +
                                                                 " is out of range (there are " +
                                                                 std::to_string(p.debug_handles.size()) + ")");
  }
  // memory plan: bounds here; the runtime also checks each view against its slot
  const MemoryPlan& mp = p.memory_plan;
  if (mp.arena_size < 0 || uint64_t(mp.arena_size) > limits.max_arena_bytes)
    fail(ErrorKind::ArenaTooLarge, what + ": memory_plan.arena_size: the arena is " + std::to_string(mp.arena_size) +
                                       " bytes, more than max_arena_bytes = " + std::to_string(limits.max_arena_bytes));
  std::set<int64_t> seen;
  int64_t tight = 0;
  for (size_t i = 0; i < mp.allocations.size(); ++i) {
    const Allocation& a = mp.allocations[i];
    std::string where = "memory_plan.allocations[" + std::to_string(i) + "]";
    v.value(a.value, where);
    if (p.values[size_t(a.value)].kind != VK::Tensor || !seen.insert(a.value).second)
      v.bad(where, "an allocation must name a distinct tensor");
    if (a.offset < 0 || a.nbytes < 0 || a.offset % int64_t(kAlign) || a.offset > mp.arena_size ||
        a.nbytes > mp.arena_size - a.offset)
      v.bad(where, "[" + std::to_string(a.offset) + ", +" + std::to_string(a.nbytes) + ") does not fit the " +
                       std::to_string(mp.arena_size) + "-byte arena aligned");
    int64_t end = (a.offset + a.nbytes + int64_t(kAlign) - 1) / int64_t(kAlign) * int64_t(kAlign);
    tight = std::max(tight, end);
  }
  if (mp.arena_size != tight)
    v.bad("memory_plan.arena_size", std::to_string(mp.arena_size) + " bytes, but the allocations end at " +
                                        std::to_string(tight) + "; a plan asks for exactly the arena its slots use");
  if (!mp.allocations.empty()) verify_plan(p, what);
}

}  // namespace pt2n
