// Postfix size expressions (src/native/format/exprs.py): validation of untrusted code and int64
// evaluation with Python's semantics (floor division, modulo with the divisor's sign), refusing
// overflow and division by zero instead of wrapping.
#include <algorithm>

#include "program.h"

namespace pt2n {

namespace {
enum Op : int64_t { PUSH, SYM, ADD, MUL, FLOORDIV, MOD, POW, MAX, MIN, EQ, NE, LT, LE, GT, GE, AND, OR, NOT,
                    CEILDIV, WHERE, N_OPS };
// has an immediate operand; fixed arity (-1: the immediate is the arity)
constexpr bool kImm[N_OPS] = {true, true, true, true, false, false, false, true, true, false, false, false,
                              false, false, false, true, true, false, false, false};
constexpr int kArity[N_OPS] = {0, 0, -1, -1, 2, 2, 2, -1, -1, 2, 2, 2, 2, 2, 2, -1, -1, 1, 2, 3};
constexpr size_t kMaxStack = 1 << 12;

[[noreturn]] void overflow(const std::string& where) {
  fail(ErrorKind::Runtime, "size expression " + where + ": the expression overflows int64");
}

int64_t floordiv(int64_t a, int64_t b, const std::string& where) {
  if (b == 0) fail(ErrorKind::Runtime, "size expression " + where + " divides by zero for these inputs");
  if (a == INT64_MIN && b == -1) overflow(where);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t pymod(int64_t a, int64_t b, const std::string& where) {
  if (b == 0) fail(ErrorKind::Runtime, "size expression " + where + " divides by zero for these inputs");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

int64_t pypow(int64_t a, int64_t b, const std::string& where) {
  if (b < 0) fail(ErrorKind::Runtime, "size expression " + where + ": negative exponent");
  if ((a > 1 || a < -1) && b > 64) overflow(where);
  int64_t r = 1;
  for (int64_t i = 0; i < b && i < 130; ++i)  // |a| <= 1 keeps |r| <= 1; 130 covers the parity of b
    if (__builtin_mul_overflow(r, a, &r)) overflow(where);
  if ((a == -1) && b >= 130) r = (b % 2) ? -1 : 1;
  return r;
}
}  // namespace

void check_code(const std::vector<int64_t>& code, size_t n_symbols, const std::string& where) {
  const std::string tail = "; the file is damaged or was not written by pt2serde";
  size_t depth = 0, i = 0, n = code.size();
  while (i < n) {
    int64_t op = code[i];
    if (op < 0 || op >= N_OPS)
      fail(ErrorKind::Format, where + ": unknown opcode " + std::to_string(op) + " at position " + std::to_string(i) +
                                  "; the file is damaged" + tail);
    int64_t imm = 0;
    if (kImm[op]) {
      if (i + 1 >= n)
        fail(ErrorKind::Format, where + ": an opcode at position " + std::to_string(i) + " lacks its operand" + tail);
      imm = code[i + 1];
    }
    if (op == SYM && (imm < 0 || uint64_t(imm) >= n_symbols))
      fail(ErrorKind::Format, where + ": symbol " + std::to_string(imm) + " at position " + std::to_string(i) +
                                  " is out of range (" + std::to_string(n_symbols) + " symbols)" + tail);
    int64_t pops = kArity[op] >= 0 ? kArity[op] : imm;
    if (pops < (kArity[op] == 0 ? 0 : 1) || uint64_t(pops) > depth)
      fail(ErrorKind::Format, where + ": the opcode at position " + std::to_string(i) + " pops " +
                                  std::to_string(pops) + " of " + std::to_string(depth) + " values" + tail);
    depth = depth + 1 - size_t(pops);
    if (depth > kMaxStack)
      fail(ErrorKind::Format, where + ": the expression needs more than 4096 stack slots" + tail);
    i += kImm[op] ? 2 : 1;
  }
  if (depth != 1)
    fail(ErrorKind::Format, where + ": the expression leaves " + std::to_string(depth) + " values instead of 1" + tail);
}

std::optional<int64_t> evaluate(const std::vector<int64_t>& code, const std::vector<std::optional<int64_t>>& syms,
                                const std::string& where) {
  std::vector<int64_t> st;
  st.reserve(16);
  size_t i = 0, n = code.size();
  while (i < n) {
    int64_t op = code[i];
    if (op == PUSH) { st.push_back(code[i + 1]); i += 2; continue; }
    if (op == SYM) {
      const auto& v = syms[size_t(code[i + 1])];
      if (!v) return std::nullopt;
      st.push_back(*v);
      i += 2;
      continue;
    }
    if (kImm[op]) {
      size_t k = size_t(code[i + 1]);
      auto first = st.end() - std::ptrdiff_t(k);
      int64_t r;
      switch (op) {
        case ADD: r = 0; for (auto it = first; it != st.end(); ++it) if (__builtin_add_overflow(r, *it, &r)) overflow(where); break;
        case MUL: r = 1; for (auto it = first; it != st.end(); ++it) if (__builtin_mul_overflow(r, *it, &r)) overflow(where); break;
        case MAX: r = *std::max_element(first, st.end()); break;
        case MIN: r = *std::min_element(first, st.end()); break;
        case AND: r = std::all_of(first, st.end(), [](int64_t x) { return x != 0; }); break;
        default: r = std::any_of(first, st.end(), [](int64_t x) { return x != 0; }); break;  // OR
      }
      st.erase(first, st.end());
      st.push_back(r);
      i += 2;
      continue;
    }
    int64_t r;
    if (op == NOT) { st.back() = st.back() == 0; ++i; continue; }
    if (op == WHERE) {
      int64_t b = st.back(); st.pop_back();
      int64_t a = st.back(); st.pop_back();
      int64_t c = st.back(); st.pop_back();
      st.push_back(c ? a : b);
      ++i;
      continue;
    }
    int64_t b = st.back(); st.pop_back();
    int64_t a = st.back(); st.pop_back();
    switch (op) {
      case FLOORDIV: r = floordiv(a, b, where); break;
      case MOD: r = pymod(a, b, where); break;
      case POW: r = pypow(a, b, where); break;
      case EQ: r = a == b; break;
      case NE: r = a != b; break;
      case LT: r = a < b; break;
      case LE: r = a <= b; break;
      case GT: r = a > b; break;
      case GE: r = a >= b; break;
      default: {  // CEILDIV: -(-a // b)
        if (a == INT64_MIN) overflow(where);
        int64_t q = floordiv(-a, b, where);
        if (q == INT64_MIN) overflow(where);
        r = -q;
      }
    }
    st.push_back(r);
    ++i;
  }
  return st[0];
}

size_t itemsize(int64_t s) {
  switch (s) {
    case 1: case 2: case 12: case 29: case 30: case 31: case 32: case 33: return 1;
    case 3: case 6: case 13: case 28: return 2;
    case 4: case 7: case 9: case 34: return 4;
    case 5: case 8: case 10: case 35: return 8;
    case 11: return 16;
    default: return 0;
  }
}

}  // namespace pt2n
