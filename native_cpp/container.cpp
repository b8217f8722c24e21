// The binary container (src/native/format/container.py): fixed prefix, msgpack header, its sha256,
// zero padding, 64-byte aligned segment ending exactly at EOF. Every number is checked
// before anything is sliced.
#include <openssl/evp.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "program.h"

namespace pt2n {

namespace {
constexpr size_t kPrefix = 40, kChecksum = 32;

uint64_t le64(const uint8_t* p) { uint64_t v = 0; for (int i = 7; i >= 0; --i) v = (v << 8) | p[i]; return v; }
uint32_t le32(const uint8_t* p) { uint32_t v = 0; for (int i = 3; i >= 0; --i) v = (v << 8) | p[i]; return v; }

void sha256(const uint8_t* data, size_t n, uint8_t out[32]) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  unsigned len = 0;
  bool ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1 && EVP_DigestUpdate(ctx, data, n) == 1 &&
            EVP_DigestFinal_ex(ctx, out, &len) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok) fail(ErrorKind::Runtime, "sha256: OpenSSL failed");
}

std::string hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) { s[2 * i] = d[p[i] >> 4]; s[2 * i + 1] = d[p[i] & 15]; }
  return s;
}
}  // namespace

std::string sha256_hex(const uint8_t* data, size_t n) {
  uint8_t out[32];
  sha256(data, n, out);
  return hex(out, 32);
}

ContainerView unpack_container(const std::vector<uint8_t>& buf, const std::string& what) {
  const uint64_t n = buf.size();
  const uint8_t* p = buf.data();
  if (n < kPrefix)
    fail(ErrorKind::Format, what + ": " + std::to_string(n) + " bytes is too short to be a native program (the fixed "
                                "prefix alone is 40 bytes)");
  if (std::memcmp(p, kMagic, 8) != 0)
    fail(ErrorKind::Format, what + ": not a native program: the file does not start with b'PT2SNATV'. Write one "
                                "with `pt2serde emit`.");
  uint32_t version = le32(p + 8), reserved = le32(p + 12);
  uint64_t hlen = le64(p + 16), seg_off = le64(p + 24), seg_len = le64(p + 32);
  if (version < kMinFormatVersion || version > kMaxFormatVersion)
    fail(ErrorKind::Version, what + ": native program format version " + std::to_string(version) +
                                 " is not supported; this reader handles versions " +
                                 std::to_string(kMinFormatVersion) + ".." + std::to_string(kMaxFormatVersion) +
                                 ". Re-emit it with this pt2serde.");
  if (reserved != 0)
    fail(ErrorKind::Format, what + ": reserved prefix field is " + std::to_string(reserved) +
                                ", expected 0; the file is damaged");
  // Overflow-safe: hlen is bounded before the additions.
  if (hlen > kMaxHeaderBytes || kPrefix + hlen + kChecksum > n)
    fail(ErrorKind::Format, what + ": header length " + std::to_string(hlen) + " runs past the end of the " +
                                std::to_string(n) + "-byte file; the file is truncated or damaged");
  uint64_t head_end = kPrefix + hlen;
  if (seg_off % kAlign || seg_off < head_end + kChecksum)
    fail(ErrorKind::Format, what + ": segment offset " + std::to_string(seg_off) + " must be a multiple of 64 at or "
                                "after the header checksum's end; the file is damaged");
  if (seg_off > n || seg_len != n - seg_off)
    fail(ErrorKind::Format, what + ": the segment (" + std::to_string(seg_off) + " + " + std::to_string(seg_len) +
                                " bytes) must end exactly at the end of the file (" + std::to_string(n) +
                                " bytes); the file is truncated or has trailing bytes");
  uint8_t digest[32];
  sha256(p, head_end, digest);
  if (std::memcmp(digest, p + head_end, kChecksum) != 0)
    fail(ErrorKind::Format, what + ": the header does not match its sha256 (stored " + hex(p + head_end, 32) +
                                "); the file is damaged or was edited after it was written. Re-emit it.");
  for (uint64_t i = head_end + kChecksum; i < seg_off; ++i)
    if (p[i]) fail(ErrorKind::Format, what + ": the padding before the segment is not zero; the file is damaged");
  return {version, p + kPrefix, hlen, seg_off, seg_len};
}

Loaded load_bytes(std::vector<uint8_t> bytes, const std::string& what, bool verify_hashes, Limits limits) {
  Loaded out;
  out.bytes = std::move(bytes);
  ContainerView c = unpack_container(out.bytes, what);
  out.program = decode_header(c.header, c.header_len, what);
  out.program.format_version = c.version;
  out.segment_offset = c.seg_off;
  out.segment_length = c.seg_len;
  validate_program(out.program, out.bytes.data() + c.seg_off, c.seg_len, what, verify_hashes, limits);
  return out;
}

Loaded load_file(const std::string& path, const std::string& what, bool verify_hashes, Limits limits) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(ErrorKind::Format, what + ": cannot read the file");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) fail(ErrorKind::Format, what + ": cannot read the file");
  return load_bytes(std::move(bytes), what, verify_hashes, limits);
}

}  // namespace pt2n
