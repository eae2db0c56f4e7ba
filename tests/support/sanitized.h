// Whether this test program runs under ASan+UBSan (the Debug configuration
// of CI), where the forward pass is many times slower: such tests take
// shorter runs there, checking the same properties.
#pragma once

namespace ds4::test {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace ds4::test
