// The closed set of "symbolic::" scalar operators (src/native/format/prim.py) with Python's semantics
// on bool < int < float: floor division and modulo follow the divisor's sign, int results that
// leave int64 are refused (Python would grow them), true division always gives a float.
#include <cmath>
#include <unordered_map>

#include "method.h"

namespace pt2n {

namespace {
using c10::IValue;

[[noreturn]] void err(const std::string& m) { throw std::runtime_error(m); }

struct Num {
  enum K { B, I, F } k;
  int64_t i = 0;
  double f = 0;
  double d() const { return k == F ? f : double(i); }
};

Num num(const IValue& v) {
  if (v.isBool()) return {Num::B, v.toBool() ? 1 : 0, 0};
  if (v.isInt()) return {Num::I, v.toInt(), 0};
  if (v.isDouble()) return {Num::F, 0, v.toDouble()};
  err("a symbolic op got a " + v.tagKind() + " operand; it takes ints, floats and bools");
}
IValue out(const Num& n) {
  if (n.k == Num::F) return n.f;
  if (n.k == Num::B) return bool(n.i);
  return n.i;
}
void arity(const std::vector<IValue>& a, size_t n) {
  if (a.size() != n) err("a symbolic op takes " + std::to_string(n) + " operands, got " + std::to_string(a.size()));
}
int64_t chk(bool overflowed, int64_t v) {
  if (overflowed) err("integer overflow in a symbolic op (the value leaves int64)");
  return v;
}
int64_t ifloordiv(int64_t a, int64_t b) {
  if (b == 0) err("ZeroDivisionError: integer division or modulo by zero");
  if (a == INT64_MIN && b == -1) err("integer overflow in a symbolic op (the value leaves int64)");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t imod(int64_t a, int64_t b) {
  if (b == 0) err("ZeroDivisionError: integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
double fmod_py(double a, double b) {
  if (b == 0) err("ZeroDivisionError: float modulo");
  double r = std::fmod(a, b);
  if (r != 0) { if ((r < 0) != (b < 0)) r += b; } else r = std::copysign(0.0, b);
  return r;
}
double ffloordiv(double a, double b) {
  if (b == 0) err("ZeroDivisionError: float floor division by zero");
  double m = std::fmod(a, b), div = (a - m) / b;
  if (m != 0 && ((b < 0) != (m < 0))) div -= 1.0;
  double fl;
  if (div != 0) { fl = std::floor(div); if (div - fl > 0.5) fl += 1.0; } else fl = std::copysign(0.0, a / b);
  return fl;
}
bool is_float(const Num& a, const Num& b) { return a.k == Num::F || b.k == Num::F; }

template <class FI, class FF>
IValue arith(const std::vector<IValue>& a, FI fi, FF ff) {
  arity(a, 2);
  Num x = num(a[0]), y = num(a[1]);
  if (is_float(x, y)) return ff(x.d(), y.d());
  return fi(x.i, y.i);
}
template <class C>
IValue cmp(const std::vector<IValue>& a, C c) {
  arity(a, 2);
  Num x = num(a[0]), y = num(a[1]);
  if (is_float(x, y)) return c(x.d(), y.d());
  return c(x.i, y.i);
}
int64_t to_int(double v) {
  if (!std::isfinite(v)) err("cannot convert float " + std::to_string(v) + " to integer");
  if (v >= 9.223372036854775807e18 || v < -9.223372036854775808e18) err("integer overflow in a symbolic op");
  return int64_t(v);
}

int64_t iadd(int64_t x, int64_t y) { int64_t r; bool o = __builtin_add_overflow(x, y, &r); return chk(o, r); }
int64_t isub(int64_t x, int64_t y) { int64_t r; bool o = __builtin_sub_overflow(x, y, &r); return chk(o, r); }
int64_t imul(int64_t x, int64_t y) { int64_t r; bool o = __builtin_mul_overflow(x, y, &r); return chk(o, r); }
IValue p_add(const std::vector<IValue>& a) { return arith(a, [](int64_t x, int64_t y) { return IValue(iadd(x, y)); }, [](double x, double y) { return IValue(x + y); }); }
IValue p_sub(const std::vector<IValue>& a) { return arith(a, [](int64_t x, int64_t y) { return IValue(isub(x, y)); }, [](double x, double y) { return IValue(x - y); }); }
IValue p_mul(const std::vector<IValue>& a) { return arith(a, [](int64_t x, int64_t y) { return IValue(imul(x, y)); }, [](double x, double y) { return IValue(x * y); }); }
IValue p_truediv(const std::vector<IValue>& a) {
  arity(a, 2);
  Num x = num(a[0]), y = num(a[1]);
  if (y.d() == 0) err("ZeroDivisionError: division by zero");
  if (!is_float(x, y)) return double(x.i) / double(y.i);  // CPython rounds int/int correctly for |x|,|y| < 2**53
  return x.d() / y.d();
}
IValue p_floordiv(const std::vector<IValue>& a) { return arith(a, [](int64_t x, int64_t y) { return IValue(ifloordiv(x, y)); }, [](double x, double y) { return IValue(ffloordiv(x, y)); }); }
IValue p_mod(const std::vector<IValue>& a) { return arith(a, [](int64_t x, int64_t y) { return IValue(imod(x, y)); }, [](double x, double y) { return IValue(fmod_py(x, y)); }); }
IValue p_pow(const std::vector<IValue>& a) {
  arity(a, 2);
  Num x = num(a[0]), y = num(a[1]);
  if (is_float(x, y) || y.i < 0) {
    if (x.d() == 0 && y.d() < 0) err("ZeroDivisionError: 0.0 cannot be raised to a negative power");
    return std::pow(x.d(), y.d());
  }
  int64_t r = 1, base = x.i, e = y.i;
  if ((base > 1 || base < -1) && e > 64) err("integer overflow in a symbolic op");
  if (base == -1) return int64_t(e % 2 ? -1 : 1);
  if (base == 0 || base == 1) return int64_t(e == 0 ? 1 : base);
  for (int64_t k = 0; k < e; ++k) r = imul(r, base);
  return r;
}
IValue p_neg(const std::vector<IValue>& a) {
  arity(a, 1);
  Num x = num(a[0]);
  if (x.k == Num::F) return -x.f;
  return chk(x.i == INT64_MIN, -x.i);
}
IValue p_pos(const std::vector<IValue>& a) { arity(a, 1); Num x = num(a[0]); if (x.k == Num::B) return x.i; return out(x); }
IValue p_abs(const std::vector<IValue>& a) {
  arity(a, 1);
  Num x = num(a[0]);
  if (x.k == Num::F) return std::fabs(x.f);
  return chk(x.i == INT64_MIN, x.i < 0 ? -x.i : x.i);
}
IValue p_eq(const std::vector<IValue>& a) { return cmp(a, [](auto x, auto y) { return IValue(x == y); }); }
IValue p_ne(const std::vector<IValue>& a) { return cmp(a, [](auto x, auto y) { return IValue(x != y); }); }
IValue p_lt(const std::vector<IValue>& a) { return cmp(a, [](auto x, auto y) { return IValue(x < y); }); }
IValue p_le(const std::vector<IValue>& a) { return cmp(a, [](auto x, auto y) { return IValue(x <= y); }); }
IValue p_gt(const std::vector<IValue>& a) { return cmp(a, [](auto x, auto y) { return IValue(x > y); }); }
IValue p_ge(const std::vector<IValue>& a) { return cmp(a, [](auto x, auto y) { return IValue(x >= y); }); }
template <class F>
IValue bitwise(const std::vector<IValue>& a, F f) {
  arity(a, 2);
  Num x = num(a[0]), y = num(a[1]);
  if (is_float(x, y)) err("TypeError: unsupported operand type(s) for a bitwise op: 'float'");
  int64_t r = f(x.i, y.i);
  if (x.k == Num::B && y.k == Num::B) return bool(r);
  return r;
}
IValue p_and(const std::vector<IValue>& a) { return bitwise(a, [](int64_t x, int64_t y) { return x & y; }); }
IValue p_or(const std::vector<IValue>& a) { return bitwise(a, [](int64_t x, int64_t y) { return x | y; }); }
IValue p_lshift(const std::vector<IValue>& a) {
  return arith(a, [](int64_t x, int64_t y) {
    if (y < 0) err("ValueError: negative shift count");
    if (x == 0) return IValue(int64_t(0));
    if (y >= 63) err("integer overflow in a symbolic op");
    int64_t r = int64_t(uint64_t(x) << y);
    if ((r >> y) != x) err("integer overflow in a symbolic op");
    return IValue(r);
  }, [](double, double) -> IValue { err("TypeError: unsupported operand type(s) for <<: 'float'"); });
}
IValue p_rshift(const std::vector<IValue>& a) {
  return arith(a, [](int64_t x, int64_t y) {
    if (y < 0) err("ValueError: negative shift count");
    return IValue(y >= 63 ? (x < 0 ? int64_t(-1) : int64_t(0)) : (x >> y));
  }, [](double, double) -> IValue { err("TypeError: unsupported operand type(s) for >>: 'float'"); });
}
IValue p_floor(const std::vector<IValue>& a) { arity(a, 1); Num x = num(a[0]); return x.k == Num::F ? to_int(std::floor(x.f)) : x.i; }
IValue p_ceil(const std::vector<IValue>& a) { arity(a, 1); Num x = num(a[0]); return x.k == Num::F ? to_int(std::ceil(x.f)) : x.i; }
IValue p_trunc(const std::vector<IValue>& a) { arity(a, 1); Num x = num(a[0]); return x.k == Num::F ? to_int(std::trunc(x.f)) : x.i; }
IValue p_round(const std::vector<IValue>& a) {
  arity(a, 1);
  Num x = num(a[0]);
  if (x.k != Num::F) return x.i;
  double r = std::round(x.f);  // half away from zero; Python rounds half to even
  if (std::fabs(x.f - std::trunc(x.f)) == 0.5) r = 2.0 * std::round(x.f / 2.0);
  return to_int(r);
}
IValue p_not(const std::vector<IValue>& a) { arity(a, 1); return IValue(num(a[0]).d() == 0); }
IValue p_float(const std::vector<IValue>& a) { arity(a, 1); return num(a[0]).d(); }
IValue p_int(const std::vector<IValue>& a) { arity(a, 1); Num x = num(a[0]); return x.k == Num::F ? to_int(std::trunc(x.f)) : x.i; }
IValue p_ite(const std::vector<IValue>& a) { arity(a, 3); return num(a[0]).d() != 0 ? a[1] : a[2]; }
IValue p_sqrt(const std::vector<IValue>& a) {
  arity(a, 1);
  double v = num(a[0]).d();
  if (v < 0) err("ValueError: math domain error");
  return std::sqrt(v);
}
template <bool Max>
IValue extreme(const std::vector<IValue>& a) {
  std::vector<IValue> items = a;
  if (a.size() == 1 && a[0].isList()) items = a[0].toList().vec();
  if (items.empty()) err("ValueError: max()/min() of an empty sequence");
  size_t best = 0;
  for (size_t k = 1; k < items.size(); ++k) {
    double x = num(items[k]).d(), b = num(items[best]).d();
    Num nx = num(items[k]), nb = num(items[best]);
    bool better = (nx.k != Num::F && nb.k != Num::F) ? (Max ? nx.i > nb.i : nx.i < nb.i) : (Max ? x > b : x < b);
    if (better) best = k;  // Python keeps the first of equal items
  }
  return items[best];
}
IValue p_sum(const std::vector<IValue>& a) {
  arity(a, 1);
  if (!a[0].isList() && !a[0].isIntList() && !a[0].isDoubleList()) err("TypeError: sum() takes a list");
  std::vector<IValue> items = a[0].isIntList() ? std::vector<IValue>(a[0].toIntVector().begin(), a[0].toIntVector().end())
                                               : a[0].isDoubleList() ? std::vector<IValue>() : a[0].toList().vec();
  if (a[0].isDoubleList()) for (double d : a[0].toDoubleVector()) items.emplace_back(d);
  IValue acc = int64_t(0);
  for (const auto& x : items) acc = p_add({acc, x});
  return acc;
}
}  // namespace

PrimFn find_prim(const std::string& name) {
  static const std::unordered_map<std::string, PrimFn> table = {
      {"add", p_add}, {"sub", p_sub}, {"mul", p_mul}, {"truediv", p_truediv}, {"floordiv", p_floordiv},
      {"mod", p_mod}, {"pow", p_pow}, {"neg", p_neg}, {"pos", p_pos}, {"abs", p_abs}, {"eq", p_eq},
      {"ne", p_ne}, {"lt", p_lt}, {"le", p_le}, {"gt", p_gt}, {"ge", p_ge}, {"and", p_and}, {"or", p_or},
      {"lshift", p_lshift}, {"rshift", p_rshift}, {"floor", p_floor}, {"ceil", p_ceil}, {"trunc", p_trunc},
      {"round", p_round}, {"not", p_not}, {"float", p_float}, {"int", p_int}, {"ite", p_ite},
      {"max", extreme<true>}, {"min", extreme<false>}, {"sum", p_sum}, {"sqrt", p_sqrt},
  };
  auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

}  // namespace pt2n
