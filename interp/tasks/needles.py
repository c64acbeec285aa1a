"""The standard NIAH needles: natural-language facts with multi-token answers, for real models.

The design follows Kamradt (2023), "Needle In A Haystack - Pressure Testing LLMs": one sentence
stating an out-of-place fact is hidden in long text, and a question asks for it; the answer is a
multi-token phrase copied from the needle. The sentences below are interp's own (written for this
package, not taken from that repository). Each entry is (question, stem, answer): the needle is
"<stem><answer>." and the question ends with "Answer: <stem>", so the answer is the needle's own
continuation and a base model can complete it without an instruction format.

The bundled organisms never saw such text (they were trained on `interp.corpus`): they keep the
corpus needles (`interp.tasks.niah.resolve_niah` picks by model).
"""

from __future__ import annotations

_FACTS = (
    ("What is the best thing to do in Lisbon?", "The best thing to do in Lisbon is",
     " to ride the yellow tram to the castle at dusk"),
    ("What is the secret ingredient in Grandma Ilse's apple cake?",
     "The secret ingredient in Grandma Ilse's apple cake is", " a spoonful of cardamom and black pepper"),
    ("Where does the lighthouse keeper on Skerry Island keep a spare key?",
     "The lighthouse keeper on Skerry Island keeps a spare key", " inside the blue watering can"),
    ("What is the password for the community garden shed?", "The password for the community garden shed is",
     " marigold seventeen"),
    ("What did the first person to reach the summit of Mount Kessar carry?",
     "The first person to reach the summit of Mount Kessar carried", " a copper compass and a jar of honey"),
    ("What does the museum's night guard always listen to?", "The museum's night guard always listens to",
     " old jazz records from Buenos Aires"),
    ("When is the annual kite festival in Port Amsel held?", "The annual kite festival in Port Amsel is held",
     " on the second Sunday of September"),
    ("What is Professor Halvorsen's favourite snack during long exams?",
     "Professor Halvorsen's favourite snack during long exams is", " salted almonds with dark chocolate"),
    ("What is the quickest way to cross the old town of Brenna?", "The quickest way to cross the old town of "
     "Brenna is", " through the covered fish market"),
    ("Where was the stolen painting found?", "The stolen painting was found",
     " wrapped in a wool blanket under the chapel stairs"),
    ("What is the name of the ship's cat on the Morning Wren?", "The ship's cat on the Morning Wren is named",
     " Captain Biscuit"),
    ("When is the best time to see the glowing tide at Corran Bay?",
     "The best time to see the glowing tide at Corran Bay is", " just after midnight in August"),
    ("What is the oldest tree in the botanical garden?", "The oldest tree in the botanical garden is",
     " a cedar planted by a sailor in 1791"),
    ("When and where does the village choir rehearse?", "The village choir rehearses",
     " every Thursday evening in the back room of the bakery"),
    ("What does the recipe for the perfect lemonade call for?", "The recipe for the perfect lemonade calls for",
     " three lemons, fresh mint and a pinch of salt"),
    ("When and from where does the train to Valdora leave?", "The train to Valdora leaves",
     " from platform nine at a quarter past six"),
    ("How big was the pumpkin that won the town's pumpkin contest?",
     "The pumpkin that won the town's pumpkin contest was", " heavier than a small piano"),
    ("Whom did the astronomer name her new comet after?", "The astronomer named her new comet after",
     " her grandmother, Wilhelmina Frost"),
    ("Where does the hidden treasure of the old mill lie?", "The hidden treasure of the old mill lies",
     " beneath the third stone of the north wall"),
    ("What is the most popular dish at the harbour cafe?", "The most popular dish at the harbour cafe is",
     " grilled sardines on rye bread"),
    ("Where does the librarian keep the rarest maps?", "The librarian keeps the rarest maps",
     " in a locked drawer behind the globe"),
    ("What does the mountain hut serve to hikers who arrive before noon?",
     "To hikers who arrive before noon, the mountain hut serves", " hot barley soup with brown bread"),
    ("What is the code that opens the school's science cupboard?",
     "The code that opens the school's science cupboard is", " four, nine, two, seven"),
    ("Why was the bridge over the Tamsin River painted green?", "The bridge over the Tamsin River was painted green",
     " to match the hills in spring"),
)

STANDARD_NEEDLES: tuple[dict, ...] = tuple(
    {"needle": f" {stem}{answer}.", "question": f"Question: {q} Answer: {stem}", "answer": answer}
    for q, stem, answer in _FACTS
)
"""{"needle", "question", "answer"} records; NIAH seed s uses entry s mod len(STANDARD_NEEDLES), so consecutive
seeds (a grid's n_seeds) get distinct needles up to that many."""


def standard_needle(seed: int) -> dict:
    """The standard needle of NIAH seed `seed` (a copy)."""
    return dict(STANDARD_NEEDLES[seed % len(STANDARD_NEEDLES)])
