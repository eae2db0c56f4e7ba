#include "tokenizer_corpus.h"

#include "core/utf8.h"

#include <array>
#include <random>

namespace ds4::test {
namespace {

// Byte length of the first UTF-8 character, start of the last one (near-miss
// specials drop whole characters so the text stays valid).
size_t first_char_length(std::string_view s) {
  size_t n = 1;
  while (n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) ++n;
  return n;
}
size_t last_char_start(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

// Short texts written for this corpus, one per language or kind.
constexpr std::string_view kEnglish[] = {
    "The quick brown fox jumps over the lazy dog.",
    "It's a well-known fact: don't count your chickens before they've hatched!",
    "Dr. Smith's report (version 2.0) was filed on Jan. 3rd, 2024 -- see p. 17.",
    "\"Quoted,\" she said; 'single quotes' too... and an ellipsis…",
    "e-mail: someone@example.com, URL: https://example.org/path?q=1&r=two#frag",
    "UPPERCASE words, MixedCase words, and snake_case_words and camelCaseWords.",
    "Prices: $19.99, €5, £3.50, ¥1000, 35% off; temperatures of -3°C and 72°F.",
};
constexpr std::string_view kItalian[] = {
    "Perché l'università è così lontana? Città, virtù, caffè e però.",
    "Nel mezzo del cammin di nostra vita mi ritrovai per una selva oscura.",
    "L'anno scorso ho mangiato più gelati di quanti ne abbia mai visti: è incredibile!",
    "Così è (se vi pare). Un po' di pazienza, per favore — grazie mille.",
};
constexpr std::string_view kChinese[] = {
    "你好，世界！今天天气很好，我们去公园散步吧。",
    "人工智能正在改变我们的生活方式，尤其是在医疗、教育和交通领域。",
    "他说：“这个问题很复杂，需要仔细考虑。”然后他离开了。",
    "《红楼梦》是中国古典四大名著之一，作者是曹雪芹。",
    "数字１２３和汉字混合：第3章第15节，共２０００字。",
};
constexpr std::string_view kJapanese[] = {
    "こんにちは、世界！今日はいい天気ですね。",
    "カタカナとひらがなと漢字が混ざった文章です。コーヒーを飲みます。",
    "東京都渋谷区で「テスト」を行いました。ｶﾀｶﾅ半角もあります。",
    "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。",
};
constexpr std::string_view kKorean[] = {
    "안녕하세요, 세계! 오늘 날씨가 정말 좋네요.",
    "한국어 문장에는 띄어쓰기가 있습니다. 감사합니다!",
    "ㄱㄴㄷ 자모와 완성형 한글이 섞여 있습니다.",
};
constexpr std::string_view kArabic[] = {
    "مرحبا بالعالم! كيف حالك اليوم؟",
    "اللُّغَةُ العَرَبِيَّةُ جَمِيلَةٌ، وَفِيهَا حَرَكَاتٌ كَثِيرَةٌ.",
    "الرقم ١٢٣٤٥ مكتوب بالأرقام العربية الهندية، و٣٫١٤ عدد عشري.",
};
constexpr std::string_view kHindi[] = {
    "नमस्ते दुनिया! आज मौसम बहुत अच्छा है।",
    "हिन्दी में मात्राएँ और संयुक्ताक्षर होते हैं: क्षत्रिय, ज्ञान, श्री।",
    "संख्या १२३४ देवनागरी अंकों में लिखी गई है।",
};
constexpr std::string_view kOther[] = {
    "Привет, мир! Как дела? Съешь же ещё этих мягких французских булок.",
    "Γειά σου κόσμε! Η γλώσσα είναι ωραία.",
    "שלום עולם! מה שלומך?",
    "สวัสดีชาวโลก ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ",
    "Xin chào thế giới! Tiếng Việt có nhiều dấu thanh.",
    "Ünïcödé çhàrâctërs: ñ, ß, ø, å, æ, œ, ł, ž, ğ, ı, İ.",
    "ﬁ ﬂ ligatures, ＦＵＬＬＷＩＤＴＨ ｌｅｔｔｅｒｓ, ℌ𝔢𝔩𝔩𝔬 𝕄𝕒𝕥𝕙, Ⅻ roman ⅻ.",
};
constexpr std::string_view kCode[] = {
    "int main(int argc, char** argv) {\n    std::vector<int> v{1, 2, 3};\n    for (auto& x : v) x *= 2;\n    return 0;\n}\n",
    "def softmax(xs):\n    m = max(xs)\n    e = [math.exp(x - m) for x in xs]\n    return [y / sum(e) for y in e]\n",
    "const f = async (a, b) => {\n\tawait fetch(`/api/${a}?b=${b}`);\n\treturn a ?? b?.c;\n};\n",
    "fn main() {\n    let s: Vec<u8> = b\"hi\".to_vec();\n    println!(\"{:?}\", s.iter().map(|x| x + 1).collect::<Vec<_>>());\n}\n",
    "func (s *Server) Handle(w http.ResponseWriter, r *http.Request) {\n\tif err != nil {\n\t\treturn\n\t}\n}\n",
    "#!/bin/sh\nfor f in *.txt; do\n  grep -n 'x' \"$f\" | wc -l >> out.log 2>&1\ndone\n",
    "{\"model\": \"deepseek\", \"layers\": [0, 4, 128], \"ok\": true, \"v\": null, \"s\": \"a\\nb\"}\n",
    "<div class=\"x\"><p>Hello &amp; goodbye</p><br/></div>\n<!-- comment -->\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%a%' ORDER BY id DESC;\n",
    "x.append(y); obj._private = self.__dict__; a->b = c >> 2; i++; --j; a != b && c || d;\n",
    "    if (x) {\r\n        y();\r\n    }\r\n",
    "template <typename T>\nstruct S : Base<T> { static constexpr auto k = sizeof...(T); };\n",
};
constexpr std::string_view kEmoji[] = {
    "😀", "😂", "👍", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇮🇹", "🇯🇵", "1️⃣", "#️⃣", "🧑🏿‍🚀",
    "✨", "🔥", "🚀", "🩷", "🫨", "🪿", "🩵", "☕", "🙏🏻", "🤷‍♀️", "👁️‍🗨️", "🐈‍⬛", "⚽", "🎉", "💯",
};
constexpr std::string_view kPunctuation[] = {
    "，", "。", "、", "！", "？", "：", "；", "“", "”", "‘", "’", "«", "»", "¿", "¡", "—", "–", "…", "·",
    "【", "】", "《", "》", "（", "）", "「", "」", "‰", "†", "§", "¶", "•", "※", "〜", "〃", "゛", "ー",
};
constexpr uint32_t kSpaces[] = {0x20, 0x20, 0x09, 0xA0, 0x3000, 0x2009, 0x202F, 0x205F, 0x1680, 0x2002, 0x200A,
                                0x0085, 0x2028, 0x2029, 0x000B, 0x000C, 0x200B, 0x2060, 0xFEFF};
constexpr uint32_t kDigitZeros[] = {0x30, 0x660, 0x6F0, 0x966, 0x9E6, 0xE50, 0xFF10, 0x1D7CE, 0x1040, 0x17E0};
constexpr uint32_t kOtherNumbers[] = {0xB2, 0xB3, 0xB9, 0xBC, 0xBD, 0x2070, 0x2074, 0x2153, 0x2160, 0x2169,
                                      0x2460, 0x2473, 0x3007, 0x3021, 0x4E00, 0x96F6};
constexpr uint32_t kCombining[] = {0x300, 0x301, 0x302, 0x303, 0x308, 0x30A, 0x327, 0x332, 0x20DD, 0x20E3, 0xFE0F,
                                   0x93F, 0x94D, 0x64E, 0x651, 0x5B8, 0xE34, 0x1AB0, 0x1DC0};
// Blocks assigned long ago (stable across Unicode versions): [first, last].
constexpr std::array<std::pair<uint32_t, uint32_t>, 40> kBlocks{{
    {0x00A1, 0x00FF}, {0x0100, 0x017F}, {0x0180, 0x024F}, {0x0250, 0x02AF}, {0x02B0, 0x02FF}, {0x0370, 0x03FF},
    {0x0400, 0x04FF}, {0x0531, 0x0556}, {0x05D0, 0x05EA}, {0x0620, 0x064A}, {0x0904, 0x0939}, {0x0E01, 0x0E3A},
    {0x10A0, 0x10C5}, {0x1100, 0x11FF}, {0x1E00, 0x1EFF}, {0x2010, 0x2027}, {0x2030, 0x205E}, {0x20A0, 0x20B5},
    {0x2100, 0x214F}, {0x2190, 0x21FF}, {0x2200, 0x22FF}, {0x2300, 0x23E7}, {0x2460, 0x24FF}, {0x2500, 0x257F},
    {0x25A0, 0x25FF}, {0x2600, 0x26FF}, {0x2700, 0x27BF}, {0x2800, 0x28FF}, {0x3001, 0x303F}, {0x3041, 0x3096},
    {0x30A1, 0x30FA}, {0x3400, 0x4DB5}, {0x4E00, 0x9FA5}, {0xAC00, 0xD7A3}, {0xE000, 0xE0FF}, {0xFF01, 0xFF5E},
    {0xFF61, 0xFF9F}, {0x1D400, 0x1D7FF}, {0x1F300, 0x1F5FF}, {0x20000, 0x2A6D6},
}};

class Generator {
 public:
  explicit Generator(const TokenizerCorpusOptions& o) : o_(o), rng_(o.seed) {}

  std::string run() {
    std::string out;
    out.reserve(o_.min_bytes + 4096);
    while (out.size() < o_.min_bytes) {
      segment(out);
      separator(out);
    }
    return out;
  }

 private:
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <class T, size_t N>
  const T& one_of(const T (&a)[N]) {
    return a[pick(N)];
  }

  void separator(std::string& out) {
    static constexpr std::string_view kSeps[] = {" ", " ", " ", "\n", "\n\n", "", "\t", "\r\n", "  ", ". "};
    out += one_of(kSeps);
  }

  void digits(std::string& out) {
    const size_t n = 1 + pick(chance(0.2) ? 40 : 8);
    for (size_t i = 0; i < n; ++i) {
      out += static_cast<char>('0' + pick(10));
      if (chance(0.05)) out += one_of({",", ".", " ", "_", "/", ":", "-", "e"});
    }
  }

  void whitespace(std::string& out) {
    static constexpr std::string_view kWs[] = {" ", " ", "\t", "\n", "\r\n", "\r", "  ", "    "};
    const size_t n = 1 + pick(chance(0.1) ? 200 : 12);
    for (size_t i = 0; i < n; ++i) out += one_of(kWs);
    static constexpr std::string_view kAfter[] = {"word", "int", ".x", "(", "}", "中文", "", "123", "é", "!"};
    out += one_of(kAfter);
  }

  void random_code_points(std::string& out) {
    const auto& [lo, hi] = kBlocks[pick(kBlocks.size())];
    const size_t n = 1 + pick(12);
    for (size_t i = 0; i < n; ++i) {
      ds4::append_utf8(out, lo + static_cast<uint32_t>(pick(hi - lo + 1)));
      if (chance(0.15)) out += ' ';
    }
  }

  void non_ascii_mix(std::string& out) {
    switch (pick(5)) {
      case 0: {  // digits of another script
        const uint32_t zero = one_of(kDigitZeros);
        for (size_t i = 0, n = 1 + pick(9); i < n; ++i) ds4::append_utf8(out, zero + static_cast<uint32_t>(pick(10)));
        break;
      }
      case 1:
        for (size_t i = 0, n = 1 + pick(4); i < n; ++i) ds4::append_utf8(out, one_of(kOtherNumbers));
        break;
      case 2:
        for (size_t i = 0, n = 1 + pick(4); i < n; ++i) out += one_of(kPunctuation);
        if (chance(0.5)) out += one_of({"abc", "中", "\n", " x", "12"});
        break;
      case 3:
        out += one_of({"a", "word", " ", "e", "中", "!", "1", "ا", "\n"});
        for (size_t i = 0, n = 1 + pick(3); i < n; ++i) ds4::append_utf8(out, one_of(kSpaces));
        out += one_of({"b", "word", " ", "中", "?", "2", "", "\n"});
        break;
      default:  // combining marks after letters, spaces, punctuation, digits
        out += one_of({"e", "a", " ", ".", "1", "中", "\n", "o", "n"});
        for (size_t i = 0, n = 1 + pick(3); i < n; ++i) ds4::append_utf8(out, one_of(kCombining));
        out += one_of({"x", "", " ", "n"});
        break;
    }
  }

  void special(std::string& out) {
    if (o_.specials.empty()) return;
    if (chance(0.2)) {  // near-misses and nesting
      const std::string& s = o_.specials[pick(o_.specials.size())];
      switch (pick(3)) {
        case 0: out += s.substr(0, last_char_start(s)); break;
        case 1: out += s.substr(first_char_length(s)); break;
        default: out += "<" + s + s + ">"; break;
      }
      return;
    }
    out += o_.specials[pick(o_.specials.size())];
  }

  void invalid(std::string& out) {
    static constexpr std::string_view kBad[] = {
        "\x80", "\xBF", "\xC3", "\xE4\xB8", "\xF0\x9F\x98", "\xC0\x80", "\xC1\x81", "\xE0\x80\x80", "\xE0\x81\x81",
        "\xED\xA0\x80", "\xED\xBF\xBF", "\xF8\x88\x80\x80\x80", "\xFE", "\xFF", "\xC3\x28", "\xE2\x82\x28",
        "\xF0\x80\x80\x80", "\xF0\x80\x81\x81", "\xC2", "\xE2\x82"};
    for (size_t i = 0, n = 1 + pick(3); i < n; ++i) out += one_of(kBad);
    out += one_of({"a", " ", "中", "1", "", "\n", ".", "😀"});
  }

  void segment(std::string& out) {
    const size_t r = pick(100);
    if (r < 12) out += one_of(kEnglish);
    else if (r < 18) out += one_of(kItalian);
    else if (r < 25) out += one_of(kChinese);
    else if (r < 30) out += one_of(kJapanese);
    else if (r < 34) out += one_of(kKorean);
    else if (r < 38) out += one_of(kArabic);
    else if (r < 42) out += one_of(kHindi);
    else if (r < 47) out += one_of(kOther);
    else if (r < 57) out += one_of(kCode);
    else if (r < 63) {
      for (size_t i = 0, n = 1 + pick(4); i < n; ++i) out += one_of(kEmoji);
    } else if (r < 69) digits(out);
    else if (r < 76) whitespace(out);
    else if (r < 84) random_code_points(out);
    else if (r < 92) non_ascii_mix(out);
    else if (r < 96) special(out);
    else if (o_.invalid_utf8) invalid(out);
    else out += one_of(kEnglish);
  }

  const TokenizerCorpusOptions& o_;
  std::mt19937_64 rng_;
};

}  // namespace

std::string tokenizer_corpus(const TokenizerCorpusOptions& options) { return Generator(options).run(); }

}  // namespace ds4::test
