#!/usr/bin/env python3
"""Deterministic multilingual test corpus for the tokenizer (nothing downloaded, nothing
committed but this script).

Documents are made from a seed: sentences in English, Chinese, Japanese, Korean, Arabic,
Russian, Hindi, Vietnamese and Greek built from word lists; code (C, Python, JSON) with tabs
and CRLF; emoji sequences (ZWJ, flags, skin tones, keycaps, recent emoji); combining marks;
digit runs; whitespace runs; the spellings of added/special tokens inside text; random code
points from every plane; and mixtures of all of these.

    python3 tests/py/make_corpus.py [--seed N] [--bytes N] OUT   # writes records "<len>\\n<bytes>"
"""
import argparse
import json
import os
import random

ENGLISH = """the of and to a in is it you that he was for on are with as I his they be at one have this
from or had by hot word but what some we can out other were all there when up use your how said an each
she which do their time if will way about many then them write would like so these her long make thing
see him two has look more day could go come did number sound no most people my over know water than call
first who may down side been now find any new work part take get place made live where after back little
only round man year came show every good me give our under name very through just form sentence great
think say help low line differ turn cause much mean before move right boy old too same tell does set three
want air well also play small end put home read hand port large spell add even land here must big high
such follow act why ask men change went light kind off need house picture try us again animal point mother
world near build self earth father head stand own page should country found answer school grow study still
learn plant cover food sun four between state keep eye never last let thought city tree cross farm hard
start might story saw far sea draw left late run don't while press close night real life few north open
seem together next white children begin got walk example ease paper group always music those both mark
often letter until mile river car feet care second book carry took science eat room friend began idea fish
mountain stop once base hear horse cut sure watch color face wood main enough plain girl usual young ready
above ever red list though feel talk bird soon body dog family direct pose leave song measure door product
black short numeral class wind question happen complete ship area half rock order fire south problem piece
told knew pass since top whole king space heard best hour better true during hundred five remember step
early hold west ground interest reach fast verb sing listen six table travel less morning ten simple several
vowel toward war lay against pattern slow center love person money serve appear road map rain rule govern
pull cold notice voice unit power town fine certain fly fall lead cry dark machine note wait plan figure star
box noun field rest correct able pound done beauty drive stood contain front teach week final gave green
oh quick develop ocean warm free minute strong special mind behind clear tail produce fact street inch
multiply nothing course stay wheel full force blue object decide surface deep moon island foot system busy
test record boat common gold possible plane stead dry wonder laugh thousand ago ran check game shape equate
tokenizer model inference server request latency throughput kernel memory cache attention layer weights
McDonald's O'Reilly e-mail state-of-the-art U.S.A. Ph.D. naïve café résumé coöperate façade São Paulo""".split()

CHINESE = """我们 你们 他们 今天 明天 昨天 时间 问题 工作 学习 中国 北京 上海 世界 经济 发展 社会 文化 历史 科学
技术 计算机 人工智能 语言 模型 数据 研究 大学 学生 老师 朋友 家庭 城市 国家 政府 公司 市场 产品 服务 系统
网络 信息 安全 环境 能源 健康 医院 医生 音乐 电影 艺术 体育 旅游 天气 春天 夏天 秋天 冬天 早上 晚上 中午
吃饭 喝茶 咖啡 水果 苹果 面条 米饭 饺子 非常 可以 应该 已经 因为 所以 但是 如果 虽然 而且 或者 还是 一起
需要 希望 觉得 知道 认为 开始 结束 继续 重要 简单 复杂 容易 困难 漂亮 高兴 快乐 美丽 安静 热闹 方便
的 了 在 是 有 和 不 这 那 也 就 都 很 会 要 说 看 去 来 到 对 个 上 下 大 小 多 少 好 新 老 长""".split()
CHINESE_PUNCT = ["，", "。", "！", "？", "、", "；", "：", "“", "”", "《", "》", "（", "）", "……"]

JAPANESE = """私 あなた 彼 彼女 今日 明日 昨日 時間 問題 仕事 勉強 日本 東京 大阪 世界 経済 社会 文化 歴史 科学
技術 コンピューター 人工知能 言語 モデル データ 研究 大学 学生 先生 友達 家族 都市 国 政府 会社 市場
サービス システム ネットワーク インターネット ソフトウェア プログラム テスト カタカナ ひらがな 漢字
です ます でした ました ません しています ですか でしょう だろう から まで より について として
は が を に で と も の へ や か ね よ な これ それ あれ どれ ここ そこ あそこ どこ
食べる 飲む 見る 聞く 話す 読む 書く 行く 来る する ある いる なる 思う 言う 分かる 使う 作る
美しい 新しい 古い 大きい 小さい 高い 安い 難しい 易しい 楽しい 嬉しい 悲しい 静か 元気 便利 大切""".split()
JAPANESE_PUNCT = ["、", "。", "！", "？", "「", "」", "『", "』", "・", "ー", "〜"]

KOREAN = """나 너 우리 그 그녀 오늘 내일 어제 시간 문제 일 공부 한국 서울 부산 세계 경제 사회 문화 역사 과학
기술 컴퓨터 인공지능 언어 모델 데이터 연구 대학교 학생 선생님 친구 가족 도시 나라 정부 회사 시장 제품
서비스 시스템 네트워크 정보 안전 환경 건강 병원 의사 음악 영화 예술 운동 여행 날씨 봄 여름 가을 겨울
은 는 이 가 을 를 에 에서 와 과 도 의 로 으로 하고 입니다 합니다 했습니다 있습니다 없습니다 하지만
그리고 그래서 그러나 만약 매우 정말 아주 조금 많이 빨리 천천히 먹다 마시다 보다 듣다 말하다 읽다 쓰다
가다 오다 하다 있다 없다 되다 생각하다 알다 모르다 좋다 나쁘다 크다 작다 높다 낮다 어렵다 쉽다 아름답다""".split()

ARABIC = """أنا أنت هو هي نحن هم اليوم غدا أمس الوقت المشكلة العمل الدراسة العالم الاقتصاد المجتمع الثقافة
التاريخ العلم التكنولوجيا الحاسوب الذكاء الاصطناعي اللغة النموذج البيانات البحث الجامعة الطالب المعلم
الصديق العائلة المدينة الدولة الحكومة الشركة السوق المنتج الخدمة النظام الشبكة المعلومات الأمن البيئة
الصحة المستشفى الطبيب الموسيقى الفيلم الفن الرياضة السفر الطقس الربيع الصيف الخريف الشتاء في من إلى على
عن مع هذا هذه ذلك تلك الذي التي كان يكون ليس لكن أو ثم قد لقد سوف جدا كثيرا قليلا كتب يكتب قرأ يقرأ ذهب
يذهب جاء يجيء قال يقول عرف يعرف كبير صغير جميل جديد قديم سهل صعب مهم سريع بطيء مُحَمَّد العَرَبِيَّة""".split()
ARABIC_PUNCT = ["،", "؛", "؟", ".", "!", "«", "»"]

RUSSIAN = """я ты он она мы вы они сегодня завтра вчера время вопрос работа учёба мир экономика общество культура
история наука технология компьютер язык модель данные исследование университет студент учитель друг семья
город страна правительство компания рынок продукт система сеть информация безопасность здоровье больница
и в на с по для не что это как но или если когда где очень хорошо плохо большой маленький новый старый""".split()

HINDI = """मैं तुम आप वह हम वे आज कल समय प्रश्न काम पढ़ाई भारत दिल्ली मुंबई दुनिया अर्थव्यवस्था समाज संस्कृति
इतिहास विज्ञान प्रौद्योगिकी कंप्यूटर भाषा मॉडल डेटा शोध विश्वविद्यालय छात्र शिक्षक मित्र परिवार शहर देश
सरकार कंपनी बाज़ार है हैं था थी थे का की के को में से पर और या लेकिन अगर बहुत अच्छा बुरा बड़ा छोटा नया""".split()

VIETNAMESE = """tôi bạn anh chị chúng ta hôm nay ngày mai hôm qua thời gian vấn đề công việc học tập Việt Nam Hà Nội
thế giới kinh tế xã hội văn hóa lịch sử khoa học công nghệ máy tính ngôn ngữ mô hình dữ liệu nghiên cứu
trường đại học sinh viên giáo viên gia đình thành phố đất nước chính phủ và của là có không được những
một này với cho từ người rất đẹp mới cũ lớn nhỏ nhanh chậm tiếng Việt phở bánh mì cà phê sữa đá""".split()

GREEK = """εγώ εσύ αυτός αυτή εμείς σήμερα αύριο χθες χρόνος ερώτηση δουλειά κόσμος οικονομία κοινωνία πολιτισμός
ιστορία επιστήμη τεχνολογία υπολογιστής γλώσσα μοντέλο δεδομένα έρευνα πανεπιστήμιο φοιτητής δάσκαλος
και το η ο των στο με για από είναι δεν που θα ένα πολύ καλό μεγάλο μικρό νέο παλιό αλφάβητο Ελλάδα""".split()

LANGUAGES = {  # name -> (words, punctuation, joins words with a space)
    "english": (ENGLISH, [".", ",", "!", "?", ";", ":", " -", "..."], True),
    "chinese": (CHINESE, CHINESE_PUNCT, False),
    "japanese": (JAPANESE, JAPANESE_PUNCT, False),
    "korean": (KOREAN, [".", ",", "!", "?"], True),
    "arabic": (ARABIC, ARABIC_PUNCT, True),
    "russian": (RUSSIAN, [".", ",", "!", "?", " —", "«", "»"], True),
    "hindi": (HINDI, ["।", ",", "?", "!"], True),
    "vietnamese": (VIETNAMESE, [".", ",", "!", "?"], True),
    "greek": (GREEK, [".", ",", ";", "·"], True),
}

EMOJI = [
    "😀", "😂", "🥲", "🤔", "👍", "👍🏻", "👍🏽", "👍🏿", "👋🏼", "🙏🏾", "❤️", "❤", "🔥", "✨", "🎉", "🚀", "💡", "✅", "❌",
    "👨‍👩‍👧‍👦", "👩‍💻", "🧑🏽‍🚀", "👨🏻‍⚕️", "🏳️‍🌈", "🏴‍☠️", "❤️‍🔥", "🧔‍♀️", "👁️‍🗨️", "🫱🏼‍🫲🏿",
    "🇺🇸", "🇨🇳", "🇯🇵", "🇰🇷", "🇫🇷", "🇩🇪", "🇧🇷", "🇮🇳", "🇪🇬", "🇺🇦", "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
    "#️⃣", "1️⃣", "*️⃣", "©️", "™️", "☺️", "✌🏻",
    # Unicode 15 and 16 (newer than PCRE2's tables on Debian 12)
    "🩷", "🩵", "🩶", "🫎", "🫏", "🪽", "🪿", "🫨", "🪼", "🫚", "🫛", "🪭", "🪮", "🫩", "🫆", "🪾", "🫜", "🪉", "🫟",
]

COMBINING = [
    "e\u0301", "a\u0300", "o\u0308", "n\u0303", "c\u0327", "A\u030a", "i\u0302\u0323", "u\u031b\u0301",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u0334\u0335\u031c\u0330\u0354L\u0328\u0357\u030e\u0344\u0306\u0302\u0312\u0306\u0350G\u0336\u035cO\u0337",
    "שָׁלוֹם", "בְּרֵאשִׁית", "क्षत्रिय", "ज्ञान", "ภาษาไทย", "สวัสดีครับ", "ཀུན་", "한글", "\u0301\u0302leading marks",
    "Tiê\u0301ng Viê\u0323t", "x\u20dd", "1\u20e3", "\u093f\u0915",
]

SPACES = [" ", "  ", "   ", "    ", "        ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r",
          " \n", "\n ", " \t\n", "\t \n \t", "\u00a0", "\u3000", "\u2028", "\u2029", "\u0085", "\u180e", "\u200b",
          "\u2009", "\u202f", "\x0b", "\x0c", " \u00a0 ", "\n\t\t", "  \n  \n"]


class Gen:
    def __init__(self, seed, added_tokens):
        self.r = random.Random(seed)
        self.added = added_tokens

    def pick(self, seq):
        return self.r.choice(seq)

    def sentence(self, lang):
        words, punct, spaced = LANGUAGES[lang]
        n = self.r.randint(3, 18)
        ws = [self.pick(words) for _ in range(n)]
        if lang == "english" and self.r.random() < 0.7:
            ws[0] = ws[0].capitalize()
        out = []
        for i, w in enumerate(ws):
            if i and spaced:
                out.append(" ")
            out.append(w)
            if i < n - 1 and self.r.random() < 0.08:
                out.append(self.pick(punct[1:] if len(punct) > 1 else punct))
        out.append(self.pick(punct))
        return "".join(out)

    def paragraph(self, lang):
        sep = " " if LANGUAGES[lang][2] else ""
        return sep.join(self.sentence(lang) for _ in range(self.r.randint(2, 8)))

    def number(self):
        kind = self.r.randint(0, 9)
        if kind == 0:
            return str(self.r.randint(0, 10 ** self.r.randint(1, 20)))
        if kind == 1:
            return f"{self.r.uniform(-1e6, 1e6):.{self.r.randint(0, 8)}f}"
        if kind == 2:
            return f"{self.r.randint(0, 10**9):,}"
        if kind == 3:
            return "".join(self.pick("٠١٢٣٤٥٦٧٨٩") for _ in range(self.r.randint(1, 7)))
        if kind == 4:
            return "".join(self.pick("０１２３４５６７８９") for _ in range(self.r.randint(1, 7)))
        if kind == 5:
            return self.pick(["²", "³", "½", "¾", "Ⅻ", "ⅷ", "①", "⑳", "𝟘𝟙𝟚", "१२३", "৩৪", "〇"])
        if kind == 6:
            return f"{self.r.randint(1900, 2100)}-{self.r.randint(1, 12):02d}-{self.r.randint(1, 28):02d}"
        if kind == 7:
            return f"v{self.r.randint(0, 9)}.{self.r.randint(0, 99)}.{self.r.randint(0, 999)}"
        if kind == 8:
            return self.pick(ENGLISH) + str(self.r.randint(0, 99999)) + self.pick(ENGLISH)
        return f"0x{self.r.getrandbits(self.r.randint(4, 64)):x}"

    def code(self):
        name = self.pick(["count", "buf", "x", "total_len", "tokenizer", "ids", "cache", "node", "i", "n"])
        kind = self.r.randint(0, 3)
        if kind == 0:
            body = (f"static int {name}_sum(const int *a, size_t n)\n{{\n\tint s = 0;\n"
                    f"\tfor (size_t i = 0; i < n; i++) {{\n\t\ts += a[i]; // add {self.pick(ENGLISH)}\n\t}}\n"
                    f"\treturn s;\n}}\n")
        elif kind == 1:
            body = (f"def {name}(items, *, limit={self.r.randint(1, 999)}):\n    \"\"\"{self.sentence('english')}\"\"\"\n"
                    f"    out = [x ** 2 for x in items if x % 3 == 0]\n    return {{'{name}': out[:limit], 'ok': True}}\n\n")
        elif kind == 2:
            body = json.dumps({name: [self.r.randint(0, 1000) for _ in range(4)], "text": self.sentence(self.pick(list(LANGUAGES))),
                               "nested": {"a": None, "b": 1.5e-7, "c": "tab\there"}}, ensure_ascii=self.r.random() < 0.5,
                              indent=self.pick([None, 2, "\t"]))
        else:
            body = (f"<div class=\"{name}\">\n  <p>{self.sentence('english')}</p>\n</div>\n"
                    f"SELECT id, {name} FROM t WHERE x >= {self.r.randint(0, 99)} AND y <> 'a''b';\n"
                    f"$ ls -la /usr/lib | grep -E '^d.*\\.so$' && echo \"done\" >> ~/log.txt\n")
        if self.r.random() < 0.3:
            body = body.replace("\n", "\r\n")
        return body

    def emoji_run(self):
        return "".join(self.pick(EMOJI) + (self.pick(["", "", " ", "  "])) for _ in range(self.r.randint(1, 6)))

    def special(self):
        tok = self.pick(self.added)
        kind = self.r.randint(0, 5)
        if kind == 0:
            return tok[: self.r.randint(1, len(tok))]  # a cut-off spelling
        if kind == 1:
            return tok + self.pick(self.added)  # two adjacent
        if kind == 2:
            return self.pick(["<think>", "</think>", "<｜User｜>", "<｜Assistant｜>", "<｜begin▁of▁sentence｜>",
                              "<｜end▁of▁sentence｜>", "｜DSML｜", "<｜image2｜>", "<|EOT|>"])
        return tok

    def random_code_point(self):
        while True:
            plane = self.r.random()
            if plane < 0.6:
                cp = self.r.randint(0, 0xFFFF)
            elif plane < 0.9:
                cp = self.r.randint(0x10000, 0x3FFFF)
            else:
                cp = self.r.randint(0x40000, 0x10FFFF)
            if not 0xD800 <= cp < 0xE000:
                return chr(cp)

    def random_text(self):
        return "".join(self.random_code_point() for _ in range(self.r.randint(1, 40)))

    def piece(self):
        k = self.r.random()
        if k < 0.45:
            return self.paragraph(self.pick(list(LANGUAGES)))
        if k < 0.55:
            return self.code()
        if k < 0.62:
            return self.emoji_run()
        if k < 0.68:
            return self.pick(COMBINING)
        if k < 0.76:
            return self.number()
        if k < 0.84:
            return self.pick(SPACES)
        if k < 0.91:
            return self.special()
        return self.random_text()

    def document(self):
        kind = self.r.random()
        if kind < 0.3:  # one language, a few paragraphs
            lang = self.pick(list(LANGUAGES))
            return "\n\n".join(self.paragraph(lang) for _ in range(self.r.randint(1, 4)))
        if kind < 0.4:
            return "".join(self.code() for _ in range(self.r.randint(1, 4)))
        parts = [self.piece() for _ in range(self.r.randint(1, 25))]
        glue = [self.pick(["", " ", " ", "\n", "", self.pick(SPACES)]) for _ in parts]
        return "".join(p + g for p, g in zip(parts, glue))


def every_code_point_docs(ranges, per_doc=512):
    """Every code point in the ranges, each between letters, digits, spaces and marks so the
    split regexes see its class from every side."""
    cps = [cp for lo, hi in ranges for cp in range(lo, hi + 1) if not 0xD800 <= cp < 0xE000]
    docs = []
    for i in range(0, len(cps), per_doc):
        chunk = [chr(c) for c in cps[i:i + per_doc]]
        docs.append("".join(f"a{c}1 {c}\u0301{c}" for c in chunk))
    return docs


def added_token_spellings(tokenizer_json):
    with open(tokenizer_json, encoding="utf-8") as f:
        return [a["content"] for a in json.load(f)["added_tokens"]]


def make_corpus(tokenizer_json, seed=1234, target_bytes=1_200_000):
    g = Gen(seed, added_token_spellings(tokenizer_json))
    docs = ["", " ", "\n", "a", "  leading", "trailing  ", "\t\tx\r\n", "<think>", "<｜User｜>hi<｜Assistant｜>",
            "</think>\n\n", "中", "😀", "🇺🇸🇺🇸", "1234567890", "abc" * 300, " " * 1000, "\n" * 300, "中文" * 500]
    size = sum(len(d.encode()) for d in docs)
    while size < target_bytes:
        d = g.document()
        docs.append(d)
        size += len(d.encode())
    return docs


def write_records(docs, path):
    with open(path, "wb") as f:
        for d in docs:
            b = d.encode()
            f.write(b"%d\n" % len(b) + b)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--bytes", type=int, default=1_200_000)
    ap.add_argument("--tokenizer", default=os.path.join(os.environ.get("DI_DATA", "data"), "tokenizer", "tokenizer.json"))
    a = ap.parse_args()
    docs = make_corpus(a.tokenizer, a.seed, a.bytes)
    write_records(docs, a.out)
    print(f"{len(docs)} documents, {sum(len(d.encode()) for d in docs)} bytes -> {a.out}")


if __name__ == "__main__":
    main()
