"""The demo history: a short conversation the project wrote itself (no external data)."""

from __future__ import annotations

DEMO_SESSIONS: list[tuple[str, str, list[dict[str, str]]]] = [
    (
        "s1",
        "2 March 2024",
        [
            {
                "speaker": "Ana",
                "text": "I finally booked the trip to Lisbon! Flight TP1351 leaves on 14 April at 07:40.",
            },
            {"speaker": "Ben", "text": "Great. Which hotel did you pick in the end?"},
            {"speaker": "Ana", "text": "Casa do Rio, near the Alfama. Booking reference CR-88412, three nights."},
            {"speaker": "Ben", "text": "Don't forget your passport expires in June, check if that's fine."},
        ],
    ),
    (
        "s2",
        "9 March 2024",
        [
            {"speaker": "Ben", "text": "How is the pottery class going?"},
            {
                "speaker": "Ana",
                "text": "Really well. Mrs. Okafor says my second bowl is ready for glazing.\n"
                "Next class is Thursday at 18:30, room 4B.",
            },
            {"speaker": "Ben", "text": "My sister Clara wants to join, how much is it?"},
            {"speaker": "Ana", "text": "It's 120 euros for eight weeks, materials included."},
        ],
    ),
    (
        "s3",
        "20 April 2024",
        [
            {"speaker": "Ana", "text": "Back from Lisbon. The tram 28 was packed but worth it."},
            {"speaker": "Ben", "text": "Did the hotel work out?"},
            {
                "speaker": "Ana",
                "text": "Casa do Rio was lovely, but they charged 35 euros extra for late checkout.\n"
                "I asked them to refund it to my Visa ending 4417.",
            },
            {"speaker": "Ben", "text": "Clara signed up for the pottery class, she starts on 2 May."},
        ],
    ),
]
