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


DEMO_TASK = "Cancel the Lisbon hotel: find its booking reference first"
DEMO_REFERENCE = "HTL-LIS-40917"
DEMO_AGENT_BUDGET = 900


def _reviews(hotel: str, notes: list[str]) -> str:
    return f"{len(notes)} reviews of {hotel}: " + " ".join(f"({i + 1}) {n}" for i, n in enumerate(notes))


# An agent's steps (action, observation). The answer is in step 2's observation; the steps after it
# push it out of the recent window, so only the memory can bring it back.
DEMO_AGENT_STEPS: list[tuple[str, str]] = [
    ("list_trips(user='ana')", "trips: Porto (2-4 May), Lisbon (5-9 May), Madrid (10-12 May)"),
    (
        "get_trip(user='ana', city='Lisbon')",
        "Lisbon, 5-9 May: flight TP1327 (ticket FL-88213); hotel Casa do Rio, Alfama, 4 nights, "
        f"booking reference {DEMO_REFERENCE}, paid with Visa ending 4417; museum pass MP-2231",
    ),
    (
        "get_policy(kind='hotel_cancellation')",
        "Hotels booked through us can be cancelled free of charge up to 48 hours before check-in. "
        "Later cancellations cost one night. A cancellation needs the booking reference and the "
        "traveller's surname; refunds go to the card that paid, within 5-10 working days. Group "
        "bookings and non-refundable rates cannot be cancelled online. Partner hotels of the Gold "
        "tier allow free cancellation up to 24 hours before check-in; the fee is waived once a year "
        "for medical reasons with a doctor's note. Changes of dates count as a cancellation and a new "
        "booking. Taxes collected at the hotel are refunded by the hotel, not by us.",
    ),
    (
        "get_trip(user='ana', city='Madrid')",
        "Madrid, 10-12 May: train AVE 3071 (ticket RN-20931); hotel Gran Via 12, 2 nights, booking "
        "reference HTL-MAD-11820, paid with Mastercard ending 9005; tapas tour TT-0412 on 11 May",
    ),
    (
        "get_reviews(hotel='Gran Via 12')",
        _reviews(
            "Gran Via 12",
            [
                "Great location, thin walls; the street is loud until 2 am on weekends.",
                "Friendly staff at the front desk, slow lifts, breakfast buffet worth the price.",
                "Room smaller than the photos, spotless bathroom, excellent shower pressure.",
                "Parking is expensive at 22 EUR a night; the garage entrance is hard to find.",
                "Rooftop bar has the best view of the Metropolis building at sunset.",
                "Air conditioning was noisy but worked; ask for a room facing the courtyard.",
            ],
        ),
    ),
    (
        "get_trip(user='ana', city='Porto')",
        "Porto, 2-4 May: bus FlixBus 0553 (ticket BS-55310); hotel Ribeira Flats, 2 nights, booking "
        "reference HTL-OPO-73302, paid with Visa ending 4417; port wine cellar visit PW-1187 on 3 May",
    ),
    (
        "get_reviews(hotel='Ribeira Flats')",
        _reviews(
            "Ribeira Flats",
            [
                "Apartment right on the river, steep stairs and no lift, bring light luggage.",
                "Key box check-in worked well; the code came by email the day before.",
                "Kitchen fully equipped, washing machine in the flat, very handy for long trips.",
                "Bells from the church next door start at 7 am, earplugs are provided.",
                "Wi-Fi was slow in the bedroom but fine in the living room.",
                "Host answered messages within minutes and recommended a great fish restaurant.",
            ],
        ),
    ),
    (
        "get_user(user='ana')",
        "Ana Souza, ana.souza@example.com, +351 912 000 441; loyalty tier Gold (free late check-out, "
        "free cancellation up to 24 hours on partner hotels); preferred language Portuguese; "
        "travel documents: passport P-7730219 valid until June, ID card valid until 2029",
    ),
    (
        "search_emails(user='ana', query='hotel')",
        "3 emails: (1) 'Your stay at Ribeira Flats' from Ribeira Flats, 28 Apr: check-in from 15:00, key "
        "box code 4471, breakfast not included; (2) 'Gran Via 12: confirm your arrival time' from Gran "
        "Via 12, 29 Apr: please reply with your arrival time, parking costs 22 EUR a night; (3) 'Rate "
        "your stay' from our travel team, 30 Apr: tell us how your last trip went",
    ),
    (
        "get_weather(city='Lisbon', dates='5-9 May')",
        "5 May 21C sunny; 6 May 19C showers; 7 May 18C rain, strong wind from the Atlantic; 8 May 20C "
        "cloudy; 9 May 23C sunny. Ferry crossings to Cacilhas may be cancelled on 7 May.",
    ),
    (
        "get_card(user='ana', last4='4417')",
        "Visa ending 4417, issued by Banco Azul, valid until 08/2027, billing address Rua das Flores 18, "
        "Porto; 3 pending refunds: none from hotels; contactless limit 50 EUR; travel insurance included",
    ),
]
