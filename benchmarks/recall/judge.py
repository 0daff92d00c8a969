"""An optional LLM judge on a second endpoint: is the answer right, whatever its wording?

Token F1 punishes a right answer in other words ("7 May" against "the Sunday before 8
May"); a judge model reads the question, the gold answer and the answer, and says
CORRECT or WRONG. For an adversarial question the gold answer is that the conversation
does not say (the dataset's adversarial answer is shown as the wrong one). The judge's
calls do not go through the recording proxy: they are no system's cost.
"""

from __future__ import annotations

import openai

from benchmarks.recall.dataset import Question

JUDGE_SYSTEM = (
    "You grade answers to questions about a long conversation. Reply with one word: "
    "CORRECT or WRONG."
)


def judge_prompt(question: Question, prediction: str) -> str:
    if question.category == 5:
        gold = "The conversation does not say (any specific answer is wrong)"
        if question.adversarial_answer:
            gold += f"; in particular {question.adversarial_answer!r} is wrong"
    else:
        gold = question.answer
    return (
        f"Question: {question.question}\n"
        f"Gold answer: {gold}\n"
        f"Answer to grade: {prediction}\n\n"
        "The answer is CORRECT when it says what the gold answer says, even in other "
        "words, with more detail, or naming the same time another way (a date, or a day "
        "relative to a date). It is WRONG when it misses, contradicts or only guesses."
    )


def verdict(text: str) -> bool:
    """Whether the judge's reply says CORRECT (and not WRONG or INCORRECT)."""
    upper = text.upper()
    if "WRONG" in upper or "INCORRECT" in upper:
        return False
    return "CORRECT" in upper


async def judge(
    client: openai.AsyncOpenAI, model: str, question: Question, prediction: str
) -> bool | None:
    """The judge's verdict; None when the judge could not be asked."""
    try:
        completion = await client.chat.completions.create(
            model=model,
            messages=[
                {"role": "system", "content": JUDGE_SYSTEM},
                {"role": "user", "content": judge_prompt(question, prediction)},
            ],
            temperature=0,
            max_tokens=8,
        )
    except openai.OpenAIError:
        return None
    choices = completion.choices or []
    content = choices[0].message.content if choices else None
    return verdict(content or "") if content else None
