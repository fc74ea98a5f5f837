// HMAC (RFC 2104) over MD2 (RFC 1319): the keyed hash NVIDIA's runtime expects from the driver's
// integrity-check export table (see export_tables.cc). Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fakecuda {

// MD2 digest of `size` bytes.
void Md2(const uint8_t* data, size_t size, uint8_t digest[16]);

// HMAC-MD2 with a 16-byte key (MD2's block size is 16, so the key is used as is).
void HmacMd2(const uint8_t key[16], const uint8_t* message, size_t size, uint8_t mac[16]);

}  // namespace fakecuda
