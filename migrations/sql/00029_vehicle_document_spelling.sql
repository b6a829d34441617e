-- +goose Up
-- An STS and a driving licence number have one spelling, as an ELS has
-- (00010): no spaces, capitals, and when every letter is Cyrillic or a
-- Latin letter drawn exactly like a Cyrillic one (A B E K M H O P C T X
-- Y), all in Cyrillic: 77YA123456 is 77УА123456. A number with another
-- Latin letter is no Russian document and keeps its letters
-- (enrollments.CanonicalVehicleDocument is the same rule). A customer who
-- enrolled one car under two spellings keeps both enrollments, now with
-- the same number: neither is merged nor cancelled here, as each may hold
-- bills and charges of its own; `rebill audit` lists such pairs for
-- support, and a fine reaching both is paid once (bill identities).
-- (translate, not upper: upper of Cyrillic depends on the database's
-- locale.)
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION pg_temp.canonical_vehicle_document(s text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN u ~ '[DFGIJLNQRSUVWZ]' THEN u ELSE translate(u, 'ABEKMHOPCTXY', 'АВЕКМНОРСТХУ') END
    FROM (SELECT translate(regexp_replace(s, '\s', '', 'g'),
                           'abcdefghijklmnopqrstuvwxyzабвгдежзийклмнопрстуфхцчшщъыьэюяё',
                           'ABCDEFGHIJKLMNOPQRSTUVWXYZАБВГДЕЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯЁ') AS u) t
$$;
-- +goose StatementEnd
UPDATE enrollments SET sts = pg_temp.canonical_vehicle_document(sts)
WHERE sts IS NOT NULL AND sts <> pg_temp.canonical_vehicle_document(sts);
UPDATE enrollments SET driver_license = pg_temp.canonical_vehicle_document(driver_license)
WHERE driver_license IS NOT NULL AND driver_license <> pg_temp.canonical_vehicle_document(driver_license);

-- +goose Down
-- The spellings a customer typed are not kept: nothing to undo.
SELECT 1;
