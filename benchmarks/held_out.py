"""Held-out letters and reports for the door and loop benchmarks (issue 45), written for them.

Four short documents (a dental letter with Windows line ends, a cardiology letter, a police
report, an employment letter), each with names in scripts other than plain Latin (Czech, Polish,
Greek, Cyrillic, Chinese), gold spans at TAB's labels, and questions whose answers lie OUTSIDE
every span (so the public version holds them and a rewrite or an answer can keep them). No
training data of the rewriter uses these texts or their templates.

In :data:`MARKED`, a span is written ``[[LABEL|text]]``; :func:`documents` strips the marks and
returns the text with its spans (character offsets, CRLF line ends where a document has them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tokendp.text.spans import Span


@dataclass(frozen=True)
class HeldOut:
    """One document: its text (as a user's file holds it), gold spans and questions."""

    doc_id: str
    text: str
    spans: tuple[Span, ...]
    questions: tuple[tuple[str, str], ...]  # (question, the answer's key words, outside every span)

    @property
    def lf_text(self) -> str:
        """The text with LF line ends (what the model reads)."""
        return self.text.replace("\r\n", "\n")

    @property
    def lf_spans(self) -> list[Span]:
        """The spans mapped to :attr:`lf_text`."""
        return [Span(s.start - self.text.count("\r\n", 0, s.start), s.end - self.text.count("\r\n", 0, s.end),
                     s.label) for s in self.spans]


MARKED: list[dict] = [
    {"id": "dental-letter", "crlf": True,
     "text": (
         "Patient: [[PERSON|Mátko Žáková]], born [[DATETIME|27 Jun. 1946]]\n"
         "Hospital number: [[CODE|4471-92-XK]]\n\n"
         "Dear [[PERSON|Dr Łukasz Wróblewski]],\n\n"
         "Thank you for referring [[PERSON|Mrs Žáková]], who attended the dental surgery clinic at "
         "[[ORG|Nemocnice Brno]] on [[DATETIME|14 March 2023]]. She reported pain in the lower left jaw for "
         "[[DATETIME|three weeks]], worse when chewing.\n\n"
         "On examination there was an abscess at the lower left first molar. A radiograph confirmed bone loss "
         "around the root. I drained the abscess and started amoxicillin for [[DATETIME|five days]].\n\n"
         "She will return on [[DATETIME|28 March 2023]] for root canal treatment. Please contact us on "
         "[[CODE|0420 555 0199]] if the swelling returns.\n\n"
         "Yours sincerely,\n\n"
         "[[PERSON|Prof. Ivanová]]\n"
         "Consultant Oral Surgeon"),
     "questions": [("What did the radiograph confirm?", "bone loss"),
                   ("Which antibiotic was started?", "amoxicillin")]},
    {"id": "cardiology-letter", "crlf": False,
     "text": (
         "Dear [[PERSON|Mrs Haverkamp]],\n\n"
         "I saw your patient [[PERSON|Νίκος Παπαδόπουλος]] ([[DATETIME|born 3 May 1958]]) in the outpatient "
         "clinic of [[ORG|St Olav's Hospital]] on [[DATETIME|12 October 2021]]. He was referred with recurrent "
         "chest pain on exertion. He is a retired [[DEM|ship's engineer]] and lives with his wife in "
         "[[LOC|Trondheim]].\n\n"
         "An exercise test was stopped early because of breathlessness, and an echocardiogram showed mild "
         "aortic stenosis. I have started bisoprolol and arranged a coronary angiogram under reference "
         "[[CODE|CA-20931]].\n\n"
         "I will review him after the angiogram.\n\n"
         "Kind regards,\n"
         "[[PERSON|Dr Ingrid Solberg]]\n"
         "Consultant Cardiologist"),
     "questions": [("What was the patient referred with?", "chest pain"),
                   ("What did the echocardiogram show?", "aortic stenosis")]},
    {"id": "police-report", "crlf": False,
     "text": (
         "INCIDENT REPORT [[CODE|2022/0457-B]]\n\n"
         "On [[DATETIME|4 April 2022]] at about 23:40, officers attended [[LOC|14 Rue des Lilas, Lyon]] "
         "following a call from [[PERSON|Дмитрий Соколов]], a [[DEM|41-year-old]] [[DEM|taxi driver]]. "
         "He stated that his bicycle had been taken from the locked courtyard and that the gate lock "
         "had been cut.\n\n"
         "A witness, [[PERSON|Ms Li Na (李娜)]], saw two men carrying a bicycle towards the tram stop. "
         "Fingerprints were taken from the gate. The stolen bicycle was valued at "
         "[[QUANTITY|€1,200]].\n\n"
         "Reporting officer: [[PERSON|Sgt. Camille Roux]], badge [[CODE|5521]]"),
     "questions": [("What was taken from the courtyard?", "bicycle"),
                   ("What was taken from the gate?", "Fingerprints")]},
    {"id": "employment-letter", "crlf": True,
     "text": (
         "[[ORG|Kowalczyk & Partners sp. z o.o.]]\n"
         "[[LOC|ul. Długa 12, 80-827 Gdańsk]]\n\n"
         "[[DATETIME|2 February 2024]]\n\n"
         "Dear [[PERSON|Ms Agnieszka Wiśniewska]],\n\n"
         "Following your interview on [[DATETIME|25 January 2024]], we are pleased to offer you the position of "
         "[[DEM|senior accountant]] in our audit department. The offer includes a salary of "
         "[[QUANTITY|PLN 14,500]] a month, a company laptop and private health insurance.\n\n"
         "The position is full time, with two days a week of work from home. Please confirm your "
         "acceptance by signing the enclosed contract.\n\n"
         "Best regards,\n"
         "[[PERSON|Tomasz Nowak]]\n"
         "Head of Human Resources"),
     "questions": [("Which department is the position in?", "audit"),
                   ("How many days a week may be worked from home?", "two days")]},
]

# The letter of issue 45's loop report, rebuilt: Windows line ends, non-Latin names, and the spans
# the ``auto`` tagger found in it, its mistake included ("Thank" as a PERSON, so the public row
# reads "Name you for referring Name", from where rewrites list salutations). At epsilon 8, seed 3
# looped to T without the no-repeat rule (docs/sanitize.md, "Loops"; tests/test_no_loops.py).
ISSUE_LETTER = (
    "Patient: Mátko Žáková, born 27 Jun. 1946\r\nHospital number: 4471-92-XK\r\n\r\n"
    "Dear Dr Łukasz Wróblewski,\r\n\r\n"
    "Thank you for referring Mrs Žáková, who attended the dental surgery clinic at Nemocnice Brno on 14 March "
    "2023. She reported pain in the lower left jaw for three weeks, worse when chewing, and a swelling that "
    "came and went.\r\n\r\n"
    "On examination there was a periapical abscess at the lower left first molar. A radiograph confirmed bone "
    "loss around the root. I drained the abscess and started amoxicillin 500 mg three times a day for five "
    "days.\r\n\r\n"
    "She will return on 28 March 2023 for root canal treatment. Please continue her usual medication and "
    "contact us on 0420 555 0199 if the swelling returns.\r\n\r\n"
    "Yours sincerely,\r\n\r\nProf. Ivanová\r\nConsultant Oral Surgeon, 2000\r\n")
ISSUE_LETTER_TAGGED = [
    ("PERSON", "Mátko Žáková"), ("DATE", "27 Jun. 1946"), ("CODE", "4471-92-XK"), ("PERSON", "Dr Łukasz Wróblewski"),
    ("PERSON", "Thank"), ("PERSON", "Mrs Žáková"), ("ORG", "Nemocnice Brno"), ("DATE", "14 March 2023"),
    ("DURATION", "three weeks"), ("DURATION", "a day"), ("DURATION", "five days"), ("DATE", "28 March 2023"),
    ("DATE", "0420 555 0199"), ("PERSON", "Prof. Ivanová"), ("ORG", "Consultant Oral Surgeon"), ("DATE", "2000")]


def issue_letter() -> HeldOut:
    """:data:`ISSUE_LETTER` with the tagger's spans (as given to sanitize, mistakes included;
    its gold spans are the same but for "Thank", which names no one)."""
    spans, pos = [], 0
    for label, piece in ISSUE_LETTER_TAGGED:
        start = ISSUE_LETTER.index(piece, pos)
        spans.append(Span(start, start + len(piece), label))
        pos = start + len(piece)
    return HeldOut("issue-letter", ISSUE_LETTER, tuple(spans), ())


_MARK = re.compile(r"\[\[([A-Z]+)\|(.*?)\]\]", re.S)


def parse(marked: str, crlf: bool = False) -> tuple[str, list[Span]]:
    """The text of ``marked`` without its marks, and the marked spans (CRLF line ends if ``crlf``)."""
    if crlf:
        marked = marked.replace("\n", "\r\n")
    out, spans, pos = [], [], 0
    for m in _MARK.finditer(marked):
        out.append(marked[pos:m.start()])
        start = sum(map(len, out))
        out.append(m.group(2))
        spans.append(Span(start, start + len(m.group(2)), m.group(1)))
        pos = m.end()
    out.append(marked[pos:])
    return "".join(out), spans


def documents() -> list[HeldOut]:
    """The held-out documents, in :data:`MARKED`'s order."""
    out = []
    for d in MARKED:
        text, spans = parse(d["text"], d["crlf"])
        for q, answer in d["questions"]:
            assert answer in text and not any(answer in text[s.start:s.end] for s in spans), (d["id"], q)
        out.append(HeldOut(d["id"], text, tuple(spans), tuple(d["questions"])))
    return out
