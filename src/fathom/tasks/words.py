"""Fixed word lists for needle keys and bAbI worlds (immutable tuples; order matters for seeds).

Keys are RULER-style ``adjective-noun`` pairs. Distractor keys that look like the real one share one of
its two words, so a model must match the whole key, not a fragment.

This module holds data only.
"""

from __future__ import annotations

ADJECTIVES: tuple[str, ...] = tuple(
    """
    abrupt absent acidic adamant agile amber ancient angry arctic ashen austere autumn bald balmy barren
    bashful bitter bland blunt bold boreal brash brave breezy brisk brittle bronze bumpy busy calm candid
    careful cheeky chilly civic clumsy cobalt cosmic crimson crisp cryptic curly damp dapper daring dizzy
    dormant dusky dusty eager early earnest elastic elder empty fabled faint fancy fearless feral fierce
    fiery flat fluffy foggy fragile frantic frosty frugal gentle giddy gilded glassy gloomy glossy golden
    grumpy hasty hazy hollow humble humid icy idle jagged jolly jovial keen lanky lavish lazy lively lofty
    lonely loud lucky lunar mellow merry misty modest muddy murky narrow nimble noble noisy oaken odd
    orange pale patient peaceful plucky polite proud quaint quick quiet rapid rare restless rigid rosy
    rowdy royal rugged rusty sandy scarlet serene shaggy shiny silent silver sleepy slender sly smoky
    snowy solar somber spare spicy spotted stark steady stormy sturdy sunny swift tame tidy timid tiny
    tranquil tropical upbeat vacant vast velvet vivid wary weary wild windy wintry witty woolly zesty
    """.split()  # noqa: SIM905 (a word list reads better as text)
)

NOUNS: tuple[str, ...] = tuple(
    """
    acorn anchor antelope anvil apricot archer arrow badger banjo barley basket beacon beetle bison
    blossom bobcat boulder bramble bucket buffalo cabin cactus camel canoe canyon cello chestnut cider
    clover comet compass condor copper cottage coyote crater cricket crow cypress dagger delta dolphin
    donkey dragon eagle easel ember falcon feather fennel ferret fiddle finch fjord flamingo flute fossil
    fountain fox gazelle geyser glacier goblet gondola granite griffin harbor harp hedgehog heron hickory
    hornet iguana island jackal jasmine juniper kayak kettle kiwi ladder lagoon lantern lemur lighthouse
    lily lobster locket lynx magnet mango maple marble meadow meteor mitten moose mosaic moth nectar
    nutmeg oasis ocelot octopus olive orchid otter owl paddle panther parrot pebble pelican pepper
    pigeon pillar pine plum pony puffin quail quartz quill rabbit raven reindeer ribbon rocket saddle
    salmon sapphire scarab seagull sparrow spruce squid stallion stork summit swan tambourine teapot
    thistle thrush tiger toucan trumpet tulip turtle valley violin viper walnut walrus weasel willow
    wolf wombat yak zebra
    """.split()  # noqa: SIM905 (a word list reads better as text)
)

# bAbI world: the classic names, places and objects first, then many more, so that a blind guess of a
# place is right about one time in sixty and question texts ("Where is Mary?") rarely repeat. Every place
# and object is one word; no name is a word of the story's verbs.
PEOPLE: tuple[str, ...] = tuple(
    """
    Mary John Sandra Daniel Fred Julie Bill Jeff Alice Bob Carol Dave Emma Frank Irene Jack Karen Leo
    Nina Oscar Paula Quentin Rita Sam Tina Ursula Victor Wendy Xavier Yvonne Zack Amber Boris Clara
    Dmitri Elena Felix Gloria Hugo Ingrid Jasper Kira Lars Maya Nadia Otto Priya Rosa Sven Tomas Uma
    Vera Walter Yusuf Zara Aaron Bianca Caleb Delia Ethan Fiona Gavin Hana Ivan Jonas Keiko Liam Mila
    Noah Olga Pedro Ravi Sofia Theo Ulla Vince Willa Yara Zoe Abel Beth Cyrus Dora Emil Flora Gus Hilda
    Igor Kofi Lena Marco Nora Omar Pia Selma Tariq Vivian Wade Anya Bruno Cleo Dario Esme
    """.split()  # noqa: SIM905 (a word list reads better as text)
)
PLACES: tuple[str, ...] = tuple(
    """
    bathroom hallway garden office bedroom kitchen cellar balcony attic library pantry garage study porch
    laundry nursery workshop greenhouse conservatory ballroom lounge parlour chapel courtyard stable barn
    orchard meadow beach harbour market bakery museum station school park cinema theatre hospital farm
    forest lake bridge tower castle cave mill pier terrace patio shed basement gym studio gallery
    playroom cloakroom scullery larder veranda
    """.split()  # noqa: SIM905 (a word list reads better as text)
)
OBJECTS: tuple[str, ...] = tuple(
    """
    football apple milk umbrella notebook kettle lantern violin hammer backpack scarf camera compass
    teapot candle basket guitar map ladder blanket bucket telescope envelope wallet pillow trumpet kite
    skateboard helmet radio shovel clock mirror vase book key bottle banana sandwich parcel
    """.split()  # noqa: SIM905 (a word list reads better as text)
)
MOVE_VERBS: tuple[str, ...] = ("moved", "went", "journeyed", "travelled")
TAKE_VERBS: tuple[str, ...] = ("picked up", "got", "grabbed", "took")
DROP_VERBS: tuple[str, ...] = ("dropped", "discarded", "put down", "left")
