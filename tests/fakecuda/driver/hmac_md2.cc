// MD2 as RFC 1319 specifies it, written for the fake driver's integrity check. Speed does not
// matter (a runtime asks three times per process), so the message is padded into one buffer.
#include "hmac_md2.h"

#include <cstring>
#include <vector>

namespace fakecuda {
namespace {

// RFC 1319's substitution table, built from the digits of pi.
constexpr uint8_t kPiSubst[256] = {
    41,  46,  67,  201, 162, 216, 124, 1,   61,  54,  84,  161, 236, 240, 6,   19,  98,  167, 5,
    243, 192, 199, 115, 140, 152, 147, 43,  217, 188, 76,  130, 202, 30,  155, 87,  60,  253, 212,
    224, 22,  103, 66,  111, 24,  138, 23,  229, 18,  190, 78,  196, 214, 218, 158, 222, 73,  160,
    251, 245, 142, 187, 47,  238, 122, 169, 104, 121, 145, 21,  178, 7,   63,  148, 194, 16,  137,
    11,  34,  95,  33,  128, 127, 93,  154, 90,  144, 50,  39,  53,  62,  204, 231, 191, 247, 151,
    3,   255, 25,  48,  179, 72,  165, 181, 209, 215, 94,  146, 42,  172, 86,  170, 198, 79,  184,
    56,  210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4,   241, 69,  157, 112, 89,  100,
    113, 135, 32,  134, 91,  207, 101, 230, 45,  168, 2,   27,  96,  37,  173, 174, 176, 185, 246,
    28,  70,  97,  105, 52,  64,  126, 15,  85,  71,  163, 35,  221, 81,  175, 58,  195, 92,  249,
    206, 186, 197, 234, 38,  44,  83,  13,  110, 133, 40,  132, 9,   211, 223, 205, 244, 65,  129,
    77,  82,  106, 220, 55,  200, 108, 193, 171, 250, 36,  225, 123, 8,   12,  189, 177, 74,  120,
    136, 149, 139, 227, 99,  232, 109, 233, 203, 213, 254, 59,  0,   29,  57,  242, 239, 183, 14,
    102, 88,  208, 228, 166, 119, 114, 248, 235, 117, 75,  10,  49,  68,  80,  180, 143, 237, 31,
    26,  219, 153, 141, 51,  159, 17,  131, 20};

}  // namespace

void Md2(const uint8_t* data, size_t size, uint8_t digest[16]) {
  // Padding: i bytes of value i, 1 <= i <= 16, to a multiple of 16; then the 16-byte checksum.
  const size_t pad = 16 - size % 16;
  std::vector<uint8_t> message(data, data + size);
  message.insert(message.end(), pad, static_cast<uint8_t>(pad));
  uint8_t checksum[16] = {};
  uint8_t last = 0;
  for (size_t block = 0; block < message.size(); block += 16) {
    for (int j = 0; j < 16; ++j) {
      checksum[j] ^= kPiSubst[message[block + j] ^ last];
      last = checksum[j];
    }
  }
  message.insert(message.end(), checksum, checksum + 16);

  uint8_t x[48] = {};
  for (size_t block = 0; block < message.size(); block += 16) {
    for (int j = 0; j < 16; ++j) {
      x[16 + j] = message[block + j];
      x[32 + j] = static_cast<uint8_t>(x[16 + j] ^ x[j]);
    }
    uint8_t t = 0;
    for (int round = 0; round < 18; ++round) {
      for (uint8_t& byte : x) {
        byte ^= kPiSubst[t];
        t = byte;
      }
      t = static_cast<uint8_t>(t + round);
    }
  }
  std::memcpy(digest, x, 16);
}

void HmacMd2(const uint8_t key[16], const uint8_t* message, size_t size, uint8_t mac[16]) {
  std::vector<uint8_t> inner(16 + size);
  for (int i = 0; i < 16; ++i) inner[i] = key[i] ^ 0x36;
  if (size) std::memcpy(inner.data() + 16, message, size);
  uint8_t inner_digest[16];
  Md2(inner.data(), inner.size(), inner_digest);
  uint8_t outer[32];
  for (int i = 0; i < 16; ++i) outer[i] = key[i] ^ 0x5c;
  std::memcpy(outer + 16, inner_digest, 16);
  Md2(outer, sizeof outer, mac);
}

}  // namespace fakecuda
